"""The record endpoints of a real server: shapes, status codes, ETag / If-Match, lifecycle, search."""

from __future__ import annotations

import time
from typing import Any

import httpx2
import pytest

from stormbuffer.core.ids import new_record_id
from tests.helpers import lock_held_elsewhere, tree_digest

from .conftest import SECRET, TIMEOUT, Server

JSON = {"Content-Type": "application/json"}
SOURCE = {"kind": "conversation", "reference": "chat:release", "actor": "human"}
RECORD_KEYS = ["id", "title", "kind", "scope", "status", "access", "created_at", "updated_at", "tags", "aliases",
               "supersedes", "sources", "body"]  # fmt: skip


def record_input(**changes: Any) -> dict[str, Any]:
    return {"title": "Release day", "kind": "decision", "access": "human", "sources": [SOURCE],
            "body": "Releases ship on Tuesdays.", **changes}  # fmt: skip


def create(client: httpx2.Client, **changes: Any) -> str:
    answer = client.post("/v1/records", json=record_input(**changes))
    assert answer.status_code == 201, answer.text
    record_id: str = answer.json()["record_id"]
    return record_id


def error(answer: httpx2.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["error"]["code"]


def test_create_then_get_list_and_edit_with_the_etag(served: Server, client: httpx2.Client) -> None:
    answer = client.post("/v1/records", json=record_input(title="Create and edit", tags=["release"]))
    assert answer.status_code == 201
    proposal = answer.json()
    assert (proposal["outcome"], proposal["status"]) == ("accepted", "active")
    record_id = proposal["record_id"]
    assert answer.headers["location"] == f"/v1/records/{record_id}"
    got = client.get(f"/v1/records/{record_id}")
    assert got.status_code == 200 and got.headers["cache-control"] == "no-store"
    record = got.json()
    assert list(record) == RECORD_KEYS
    assert (record["scope"], record["access"], record["tags"]) == (served.scope, "human", ["release"])
    etag = got.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"') and len(etag) == 66
    assert record_id in [item["id"] for item in client.get("/v1/records").json()]
    edited = client.put(f"/v1/records/{record_id}", json=record_input(title="Create and edit", body="Now Wednesdays."),
                        headers={"If-Match": etag})  # fmt: skip
    assert edited.status_code == 200, edited.text
    assert edited.json()["body"] == "Now Wednesdays." and edited.json()["created_at"] == record["created_at"]
    assert edited.headers["etag"] != etag
    assert client.get(f"/v1/records/{record_id}").headers["etag"] == edited.headers["etag"]


def test_a_stale_etag_is_refused_and_the_external_edit_is_kept(served: Server, client: httpx2.Client) -> None:
    record_id = create(client, title="Edited elsewhere")
    etag = client.get(f"/v1/records/{record_id}").headers["etag"]
    path = served.box.project_root / "records" / f"{record_id}.md"
    external = path.read_bytes().replace(b"Releases ship on Tuesdays.", b"Changed in an editor.")
    path.write_bytes(external)
    answer = client.put(f"/v1/records/{record_id}", json=record_input(title="Edited elsewhere", body="Mine."),
                        headers={"If-Match": etag})  # fmt: skip
    assert error(answer) == (412, "revision_conflict")
    assert answer.headers["etag"] == client.get(f"/v1/records/{record_id}").headers["etag"] != etag
    assert path.read_bytes() == external


def test_if_match_is_required(client: httpx2.Client) -> None:
    record_id = create(client, title="Needs a precondition")
    for headers in ({}, {"If-Match": ""}, {"If-Match": "*"}):
        answer = client.put(f"/v1/records/{record_id}", json=record_input(), headers=headers)
        assert error(answer) == (428, "precondition_required")
        assert "If-Match" in answer.json()["error"]["message"]
    missing = client.put(f"/v1/records/{new_record_id()}", json=record_input(), headers={"If-Match": '"x"'})
    assert error(missing) == (404, "not_found")


def test_invalid_kind_is_a_validation_error(served: Server, client: httpx2.Client) -> None:
    before = tree_digest(served.box.project_root / "records")
    answer = client.post("/v1/records", json=record_input(kind="invalid"))
    assert error(answer) == (422, "validation_error")
    assert answer.json()["error"]["message"] == (
        "field `kind` is invalid: must be one of fact, decision, procedure, or checkpoint"
    )
    assert tree_digest(served.box.project_root / "records") == before


@pytest.mark.parametrize("changes", [{"title": " "}, {"sources": []}, {"body": "   "}])
def test_an_invalid_record_is_refused_with_its_proposal_and_nothing_is_written(
    served: Server, client: httpx2.Client, changes: dict[str, Any]
) -> None:
    before = tree_digest(served.box.project_root / "records")
    answer = client.post("/v1/records", json=record_input(**changes))
    assert answer.status_code == 422 and answer.json()["outcome"] == "invalid"
    assert tree_digest(served.box.project_root / "records") == before


@pytest.mark.parametrize(("body", "expected"), [
    ({"kind": "fact"}, "field `title` is required"),
    (record_input(id=new_record_id()), "request body contains an unknown field"),
    (record_input(status="active"), "request body contains an unknown field"),
    (record_input(tags="release"), "field `tags` is invalid: must be an array"),
    (record_input(sources=[{**SOURCE, "kind": "rumour"}]), "field `sources[0].kind` is invalid: must be one of "
     "conversation, document, issue, or url"),
    (record_input(sources=[{**SOURCE, "observed_at": "yesterday"}]), "field `sources[0].observed_at` is invalid: "
     "must be an RFC 3339 timestamp with an offset"),
    (record_input(supersedes=["not-an-id"]), "field `supersedes[0]` is invalid: must be a valid UUID"),
    ([record_input()], "request body must be a JSON object"),
])  # fmt: skip
def test_body_shape_errors_name_the_field(client: httpx2.Client, body: Any, expected: str) -> None:
    answer = client.post("/v1/records", json=body)
    assert error(answer) == (422, "validation_error")
    assert answer.json()["error"]["message"] == expected


def test_framework_errors_use_the_error_shape(client: httpx2.Client) -> None:
    assert error(client.post("/v1/records", content=b"{not json", headers=JSON)) == (400, "invalid_json")
    assert error(client.post("/v1/records", content=b"{}", headers={"Content-Type": "text/plain"})) == (
        415, "unsupported_media_type")  # fmt: skip
    assert error(client.post("/v1/records", content=b" " * 262145, headers=JSON)) == (413, "payload_too_large")
    assert error(client.delete("/v1/records", headers=JSON)) == (405, "method_not_allowed")
    assert error(client.get("/v1/nothing")) == (404, "not_found")
    assert error(client.get("/v1/records/")) == (404, "not_found")  # no redirect to the path without the slash
    assert error(client.get("/v1/records/not-a-uuid")) == (422, "validation_error")
    assert error(client.get("/v1/records", params={"all": "yes"})) == (400, "invalid_query")
    assert error(client.get("/v1/records", params={"colour": "red"})) == (400, "invalid_query")


def test_lifecycle_transitions(served: Server, client: httpx2.Client) -> None:
    record_id = create(client, title="Lifecycle")
    archived = client.post(f"/v1/records/{record_id}/archive", headers=JSON)
    assert archived.status_code == 200 and archived.json()["status"] == "archived" and "etag" in archived.headers
    assert record_id not in [item["id"] for item in client.get("/v1/records").json()]
    assert record_id in [item["id"] for item in client.get("/v1/records", params={"all": "true"}).json()]
    stale_edit = client.put(f"/v1/records/{record_id}", json=record_input(title="Lifecycle"),
                            headers={"If-Match": archived.headers["etag"]})  # fmt: skip
    assert error(stale_edit) == (422, "invalid_state")
    again = client.post(f"/v1/records/{record_id}/archive", headers=JSON)
    assert error(again) == (422, "invalid_state")
    assert again.json()["error"]["message"] == f"record {record_id} is archived, not active"
    restored = client.post(f"/v1/records/{record_id}/restore", headers=JSON)
    assert restored.status_code == 200 and restored.json()["status"] == "active"
    approve_id, reject_id = new_record_id(), new_record_id()
    served.write(approve_id, title="Candidate to approve", status="candidate")
    served.write(reject_id, title="Candidate to reject", status="candidate")
    approved = client.post(f"/v1/records/{approve_id}/approve", headers=JSON)
    assert approved.status_code == 200
    assert (approved.json()["outcome"], approved.json()["status"]) == ("accepted", "active")
    rejected = client.post(f"/v1/records/{reject_id}/reject", headers=JSON)
    assert rejected.status_code == 200
    assert (rejected.json()["outcome"], rejected.json()["status"]) == ("accepted", "archived")
    assert client.get(f"/v1/records/{reject_id}").json()["status"] == "archived"
    assert error(client.post(f"/v1/records/{new_record_id()}/approve", headers=JSON)) == (404, "not_found")


def test_duplicates_are_refused_and_overlaps_written_as_candidates(client: httpx2.Client) -> None:
    create(client, title="Duplicate check", body="Only once.")
    duplicate = client.post("/v1/records", json=record_input(title="Duplicate check", body="Only once."))
    assert duplicate.status_code == 409 and duplicate.json()["outcome"] == "duplicate_of"
    overlap = client.post("/v1/records", json=record_input(title="Duplicate check", body="Something else."))
    assert overlap.status_code == 201
    assert (overlap.json()["outcome"], overlap.json()["status"]) == ("possible_overlap", "candidate")


def test_search_is_hybrid_and_reports_its_mode(client: httpx2.Client) -> None:
    record_id = create(client, title="Quasar maintenance window", body="The quasar cluster is patched on Fridays.")
    query = {"query": "when is the quasar cluster patched", "limit": 3}
    answer = client.get("/v1/search", params=query)
    deadline = time.monotonic() + 120.0  # earlier tests' records may still be embedded in the background
    while answer.headers.get("stormbuffer-semantic-fallback") == "vector_projection_incomplete":
        assert time.monotonic() < deadline, "the background embedding never finished"
        time.sleep(0.2)
        answer = client.get("/v1/search", params=query)
    assert answer.status_code == 200
    assert answer.headers["stormbuffer-retrieval-mode"] == "hybrid"
    assert "stormbuffer-semantic-fallback" not in answer.headers
    hits = answer.json()
    assert hits[0]["record_id"] == record_id and "path" not in hits[0] and len(hits) <= 3
    assert hits[0]["access"] == "human"  # people read human records too


def test_search_parameters_are_checked(client: httpx2.Client) -> None:
    blank = client.get("/v1/search", params={"query": "  "})
    assert error(blank) == (422, "validation_error")
    assert blank.json()["error"]["message"] == "field `query` is invalid: must not be empty"
    assert error(client.get("/v1/search")) == (400, "invalid_query")
    assert error(client.get("/v1/search", params={"query": "x", "mode": "lexical"})) == (400, "invalid_query")
    assert error(client.get("/v1/search", params={"query": "x", "limit": "many"})) == (400, "invalid_query")
    assert client.get("/v1/search", params={"query": "x", "limit": "0"}).status_code == 200


def test_an_invalid_record_file_is_reported_without_its_content(served: Server, client: httpx2.Client) -> None:
    record_id = new_record_id()
    path = served.write(record_id, kind="rumour", body=f"token {SECRET}\n")
    try:
        listed = client.get("/v1/records")  # reads every file at once, as the reference does
        searched = searched_after_the_watcher(
            client, {"query": "token"}, lambda answer: "stormbuffer-degraded" in answer.headers
        )
        assert listed.status_code == 422
        assert (searched.status_code, searched.headers["stormbuffer-degraded"]) == (
            200,
            "1",
        )  # the valid records answer
        for answer in (listed, searched):
            assert SECRET not in answer.text and str(served.box.base) not in answer.text
    finally:
        path.unlink()
    assert client.get("/v1/records").status_code == 200


def searched_after_the_watcher(client: httpx2.Client, params: dict[str, str], done: Any) -> httpx2.Response:
    """A search repeated until `done(answer)`: the server's records watcher reports a file written by
    another process after a short delay (longer on a busy machine), bounded here by `TIMEOUT`."""
    deadline = time.monotonic() + TIMEOUT
    while not done(answer := client.get("/v1/search", params=params)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return answer


def test_a_write_while_another_process_holds_the_store_is_busy(served: Server, client: httpx2.Client) -> None:
    before = tree_digest(served.box.project_root / "records")
    remember = {"version": 1, "title": "Busy", "kind": "fact", "body": "Not now.", "source": SOURCE}
    with lock_held_elsewhere(served.box.project_root / "locks" / "mutation.lock"):
        assert error(client.post("/v1/records", json=record_input(title="While busy"))) == (409, "store_busy")
        answer = client.post("/v1/invoke/remember", json=remember)
        assert answer.status_code == 409 and answer.json()["error"]["code"] == "conflict"
        assert client.get("/v1/records").status_code == 200  # reads take no lock
    assert tree_digest(served.box.project_root / "records") == before

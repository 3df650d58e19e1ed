"""Only the user's credential opens a running `sbuf serve`: no token or a wrong one is 401 and learns
nothing, a program's writes pass the secret guard, and every answer is marked `no-store` and
`nosniff`. A real server on a loopback port."""

from __future__ import annotations

import re
import secrets

import httpx2
import pytest

from stormbuffer.auth.credential import token_path
from tests.helpers import tree_digest

from .conftest import SECRET, Server

HUMAN_ONLY = "01900000-0000-7000-8000-00000000a11c"
RECORD = {"title": "Guarded write", "kind": "fact", "access": "human", "body": "Written with the token.",
          "sources": [{"kind": "conversation", "reference": "chat", "actor": "human"}]}  # fmt: skip
AWS_KEY = "AKIA" + "QYLPMN5HFIQR7XZW"
ROUTES = [
    ("GET", "/v1/records", None),
    ("GET", "/v1/records?all=true", None),
    ("GET", f"/v1/records/{HUMAN_ONLY}", None),
    ("GET", "/v1/search?query=private+text", None),
    ("POST", "/v1/records", RECORD),
    ("PUT", f"/v1/records/{HUMAN_ONLY}", RECORD),
    ("POST", f"/v1/records/{HUMAN_ONLY}/archive", None),
    ("POST", f"/v1/records/{HUMAN_ONLY}/approve", None),
    ("POST", "/v1/invoke/get", {"version": 1, "id": HUMAN_ONLY}),
    ("POST", "/v1/invoke/remember", {"version": 1, "title": "t", "kind": "fact", "body": "b",
                                     "source": {"kind": "conversation", "reference": "r", "actor": "agent"}}),
]  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def human_only_record(served: Server) -> None:
    served.write(HUMAN_ONLY, title="Private text", access="human", body=f"Only people read this. {SECRET}\n")


@pytest.mark.parametrize("authorization", [
    None, "Bearer", "bearer wrong", "Bearer wrong", "Bearer {token}x", "Bearer {short}", "Basic {token}", "{token}",
    "Bearer " + secrets.token_urlsafe(32),
])  # fmt: skip
def test_without_the_token_nothing_is_read_or_written(served: Server, authorization: str | None) -> None:
    before = tree_digest(served.box.project_root / "records")
    headers = (
        {}
        if authorization is None
        else {"Authorization": authorization.format(token=served.token, short=served.token[:-1])}
    )
    with served.client(token=False, headers=headers) as client:
        for method, path, body in ROUTES:
            answer = client.request(method, path, json=body if body is not None or method == "GET" else {})
            assert answer.status_code == 401, (method, path, answer.text)
            assert answer.json()["error"]["code"] == "unauthorized"
            assert answer.headers["WWW-Authenticate"] == "Bearer"
            assert "Private text" not in answer.text and SECRET not in answer.text and "ETag" not in answer.headers
    assert tree_digest(served.box.project_root / "records") == before
    assert served.token not in "".join(served.log)  # the log never holds the token


def test_a_cookie_is_not_the_apis_credential(served: Server) -> None:
    with served.client(token=False) as client:
        cookie = f"stormbuffer_session_{served.port}={served.token}"
        assert client.get("/v1/records", headers={"Cookie": cookie}).status_code == 401


def test_with_the_token_every_route_answers(served: Server, client: httpx2.Client) -> None:
    listed = client.get("/v1/records?all=true")
    assert listed.status_code == 200 and HUMAN_ONLY in listed.text  # people's records: the token is the user's
    assert client.get(f"/v1/records/{HUMAN_ONLY}").status_code == 200


def test_every_answer_is_marked_no_store_and_nosniff(served: Server, client: httpx2.Client) -> None:
    with served.client(token=False) as anonymous:
        answers = [
            client.get("/v1/records"), client.get(f"/v1/records/{HUMAN_ONLY}"), client.get("/v1/search?query=x"),
            client.get("/v1/records/not-an-id"), client.get("/nothing"), client.get("/openapi.json"),
            client.post("/v1/invoke/get", json={"version": 1, "id": HUMAN_ONLY}),
            client.post("/v1/records", json=RECORD, headers={"Origin": "http://evil.example"}),
            anonymous.get("/v1/records"),
        ]  # fmt: skip
    for answer in answers:
        assert answer.headers["Cache-Control"] == "no-store", answer.request.url
        assert answer.headers["X-Content-Type-Options"] == "nosniff", answer.request.url


@pytest.mark.parametrize("planted", [SECRET, AWS_KEY, f"aws_access_key_id = {AWS_KEY}"])
def test_a_programs_write_passes_the_secret_guard(served: Server, client: httpx2.Client, planted: str) -> None:
    """The token is a program's credential, never a person's: what `sbuf invoke remember` refuses, the
    API refuses too, in a new record and in an edit, and nothing is written."""
    before = tree_digest(served.box.project_root / "records")
    created = client.post("/v1/records", json={**RECORD, "title": "Deploy key", "body": f"Use {planted} to deploy."})
    assert (created.status_code, created.json()["error"]["code"]) == (422, "secret_detected")
    assert planted not in created.text
    in_source = {**RECORD, "sources": [{"kind": "url", "reference": f"https://x.example/?k={planted}", "actor": "a"}]}
    assert client.post("/v1/records", json=in_source).json()["error"]["code"] == "secret_detected"
    record = client.get(f"/v1/records/{HUMAN_ONLY}")
    edit = {**RECORD, "title": "Private text", "body": f"Now with {planted}."}
    replaced = client.put(f"/v1/records/{HUMAN_ONLY}", json=edit, headers={"If-Match": record.headers["ETag"]})
    assert (replaced.status_code, replaced.json()["error"]["code"]) == (422, "secret_detected")
    invoked = client.post("/v1/invoke/remember", json={
        "version": 1, "title": "Deploy key", "kind": "fact", "body": f"Use {planted} to deploy.",
        "source": {"kind": "conversation", "reference": "chat", "actor": "agent"}})  # fmt: skip
    assert invoked.json()["error"]["code"] == "secret_detected"
    assert tree_digest(served.box.project_root / "records") == before


def test_a_clean_write_is_still_the_references_active_record(client: httpx2.Client) -> None:
    created = client.post("/v1/records", json={**RECORD, "title": "Releases are on Tuesdays"})
    assert created.status_code == 201
    assert (created.json()["outcome"], created.json()["status"]) == ("accepted", "active")


def test_serve_prints_the_sign_in_address_and_keeps_the_token_out_of_the_log(served: Server) -> None:
    assert served.process.stdout is not None
    line = served.process.stdout.readline()
    assert line == f"Review page: http://{served.address}/sign-in?token={served.token}\n"
    assert served.token not in "".join(served.log)
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", served.token)
    path = token_path(served.box.env)
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)

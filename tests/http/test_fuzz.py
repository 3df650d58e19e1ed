"""Hypothesis against a real server: whatever the body, headers or query string, the answer is a
JSON error or success that the OpenAPI document describes, never a 500, never a traceback, a host
path or a secret."""

from __future__ import annotations

import json
from urllib.parse import quote

import httpx2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stormbuffer.core.ids import new_record_id

from .conftest import SECRET, Server

JSON = {"Content-Type": "application/json"}
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
RECORD_ID = "0190a6b3-7c1e-7a51-9c39-1b2f4c9d8e11"
FIELDS = ["title", "kind", "access", "tags", "aliases", "supersedes", "sources", "body", "id", "status", "path",
          "version", "query", "limit", "budget", "scope", "scopes", "source", "record", "actor",
          "approved"]  # fmt: skip
OPERATIONS = ["search", "context", "get", "remember", "update", "propose", "supersede", "archive", "forget", "x"]

texts = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", " ", "fact", "agent", "human", "candidate", SECRET, "/etc/passwd", "..", RECORD_ID,
                     "2026-01-01T00:00:00Z", "project:x", "global", "\x00", "\u202e"]),
)  # fmt: skip
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), texts)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.sampled_from(FIELDS), texts), inner, max_size=5),
), max_leaves=12)  # fmt: skip
sources = st.fixed_dictionaries(
    {"kind": st.sampled_from(["conversation", "url", "rumour"]), "reference": texts, "actor": texts},
    optional={"observed_at": texts, "revision": texts, "content_hash": texts},
)
near_records = st.fixed_dictionaries(
    {"title": texts, "kind": st.sampled_from(["fact", "decision", "invalid"]),
     "access": st.sampled_from(["human", "agent", "x"]), "sources": st.lists(sources, max_size=2), "body": texts},
    optional={"tags": st.lists(texts, max_size=3), "supersedes": st.lists(texts, max_size=2), "extra": values},
)  # fmt: skip
bodies = st.one_of(values.map(lambda value: json.dumps(value).encode()),
                   near_records.map(lambda value: json.dumps(value).encode()), st.binary(max_size=64))  # fmt: skip
header_names = st.text(
    st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=":"), min_size=1, max_size=20
)
header_values = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40).map(str.strip)
headers = st.dictionaries(st.one_of(header_names, st.sampled_from(["If-Match", "Origin", "Content-Type", "Accept",
                                                                   "Sec-Fetch-Site", "Transfer-Encoding", "Expect"])),
                          header_values, max_size=4)  # fmt: skip


def assert_clean(served: Server, answer: httpx2.Response) -> None:
    assert answer.status_code < 500, (answer.status_code, answer.text[:300])
    text = answer.text
    assert "Traceback" not in text and str(served.box.base) not in text and "/home/" not in text
    if answer.status_code >= 300:
        assert SECRET not in text


@SETTINGS
@given(body=bodies, path=st.sampled_from(["/v1/records", f"/v1/records/{RECORD_ID}", "/v1/invoke/{op}"]),
       operation=st.sampled_from(OPERATIONS), etag=st.one_of(st.none(), header_values))  # fmt: skip
def test_request_bodies(served: Server, client: httpx2.Client, body: bytes, path: str, operation: str,
                        etag: str | None) -> None:  # fmt: skip
    extra = {"If-Match": etag} if etag else {}
    method = "PUT" if path.endswith(RECORD_ID) else "POST"
    answer = client.request(method, path.format(op=operation), content=body, headers={**JSON, **extra})
    assert_clean(served, answer)


@SETTINGS
@given(extra=headers, method=st.sampled_from(["GET", "POST", "PUT", "HEAD", "OPTIONS", "PATCH"]),
       path=st.sampled_from(["/v1/records", f"/v1/records/{RECORD_ID}/archive", "/v1/search?query=x",
                             "/v1/invoke/get", "/openapi.json", "/"]))  # fmt: skip
def test_request_headers(served: Server, client: httpx2.Client, extra: dict[str, str], method: str, path: str) -> None:
    try:
        answer = client.request(
            method, path, headers={**JSON, **extra}, content=b'{"version":1,"id":"%s"}' % RECORD_ID.encode()
        )
    except httpx2.LocalProtocolError:  # the client itself will not send such a header
        return
    if method == "HEAD":
        assert answer.status_code < 500
    else:
        assert_clean(served, answer)


@SETTINGS
@given(params=st.lists(st.tuples(st.sampled_from(["query", "limit", "all", "mode", "q", ""]), texts), max_size=4),
       path=st.sampled_from(["/v1/search", "/v1/records"]))  # fmt: skip
def test_query_strings(served: Server, client: httpx2.Client, params: list[tuple[str, str]], path: str) -> None:
    assert_clean(served, client.get(path, params=params))


def test_the_fuzzed_store_is_still_valid(served: Server, client: httpx2.Client) -> None:
    answer = client.get("/v1/records", params={"all": "true"})
    assert answer.status_code == 200
    assert client.get(f"/v1/records/{new_record_id()}").status_code == 404


@SETTINGS
@given(segment=st.one_of(texts, st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF), max_size=60)),
       suffix=st.sampled_from(["", "/approve", "/reject", "/archive", "/restore", "/x"]),
       method=st.sampled_from(["GET", "POST", "PUT"]))  # fmt: skip
def test_record_ids_in_paths(served: Server, client: httpx2.Client, segment: str, suffix: str, method: str) -> None:
    path = "/v1/records/" + quote(segment, safe="") + suffix
    assert_clean(served, client.request(method, path, headers=JSON, content=b"{}"))

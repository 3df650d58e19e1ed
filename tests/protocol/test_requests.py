"""Request checking: the envelope steps, the schema check and its one reported problem, field rules.

Runs `handle` in this process against a copy of the contract store (every envelope is checked
against schema/v1 by the fixture). Messages are compared exactly: they are part of the contract.
"""

from __future__ import annotations

import json

import pytest

from stormbuffer.core.stores import View
from stormbuffer.protocol.invoke import OPERATIONS, encode, handle
from stormbuffer.protocol.session import NoEmbedder
from tests.protocol.conftest import BACKUP_ID, LOCKFILE_ID, PROJECT_SCOPE, Store

SOURCE = {"kind": "conversation", "reference": "session 42", "actor": "agent"}
RECORD = {
    "title": "Deploys need a green build",
    "kind": "fact",
    "access": "agent",
    "body": "Run the suite first.",
    "sources": [SOURCE],
}
PATH_DENIED = ("path_denied", "filesystem paths are not accepted by the invocation protocol")
UNKNOWN = ("invalid_request", "request contains an unknown field")


def error(envelope: dict) -> tuple[str, str]:
    assert envelope["ok"] is False, envelope
    return envelope["error"]["code"], envelope["error"]["message"]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"   ",
        b"{not-json",
        b'{"version":1} {}',
        b'{"version":1}{"version":1}',
        b"[1,2",
        b"\xff\xfe{}",
        b'\xef\xbb\xbf{"version":1,"query":"x"}',
        b'{"version":1,"query":NaN}',
        b'{"version":1,"query":Infinity}',
        b'{"version":1,"query":"\\ud800"}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"version":1,"limit":' + b"9" * 5000 + b"}",
    ],
)
def test_input_that_is_not_one_json_value_is_invalid_json(store: Store, data: bytes) -> None:
    assert error(store.handle("search", data)) == ("invalid_json", "stdin must contain one JSON object")


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ([], ("invalid_request", "request must be a JSON object")),
        ("search", ("invalid_request", "request must be a JSON object")),
        (None, ("invalid_request", "request must be a JSON object")),
        ({}, ("invalid_request", "request must include integer version 1")),
        ({"version": "1"}, ("invalid_request", "request must include integer version 1")),
        ({"version": 1.0}, ("invalid_request", "request must include integer version 1")),
        ({"version": -1}, ("invalid_request", "request must include integer version 1")),
        ({"version": True}, ("invalid_request", "request must include integer version 1")),
        ({"version": None}, ("invalid_request", "request must include integer version 1")),
        ({"version": 2**64}, ("invalid_request", "request must include integer version 1")),
        ({"version": 0}, ("unsupported_version", "request version is not supported")),
        ({"version": 2}, ("unsupported_version", "request version is not supported")),
        (
            {"version": 1, "operation": "context", "query": "x"},
            ("invalid_request", "request operation does not match the command operation"),
        ),
        (
            {"version": 1, "operation": 5, "query": "x"},
            ("invalid_request", "request operation does not match the command operation"),
        ),
    ],
)
def test_envelope_checks(store: Store, request_: object, expected: tuple[str, str]) -> None:
    assert error(store.handle("search", json.dumps(request_).encode())) == expected


def test_version_is_checked_before_the_operation_name(store: Store) -> None:
    assert error(store.handle("forget", b'{"version":2}'))[0] == "unsupported_version"
    envelope = store.handle("forget", b'{"version":1}')
    assert error(envelope) == ("unknown_operation", "operation is not supported by protocol version 1")
    assert envelope["operation"] == "forget"


@pytest.mark.parametrize("key", ["path", "store_path", "filename", "profile", "root", "store", "file"])
@pytest.mark.parametrize("operation", OPERATIONS)
def test_path_like_keys_are_denied_without_echo(store: Store, operation: str, key: str) -> None:
    secret_path = "/home/someone/private/notes.md"
    envelope = store.handle(operation, {"version": 1, key: secret_path})
    assert error(envelope) == PATH_DENIED
    assert "/home/" not in encode(envelope)


@pytest.mark.parametrize("operation", OPERATIONS)
def test_unknown_keys_are_invalid_and_the_alphabetically_first_wins(store: Store, operation: str) -> None:
    assert error(store.handle(operation, {"version": 1, "zzz": 1})) == UNKNOWN
    assert error(store.handle(operation, {"version": 1, "aaa": 1, "path": "/x"})) == UNKNOWN
    assert error(store.handle(operation, {"version": 1, "path": "/x", "zzz": 1})) == PATH_DENIED


@pytest.mark.parametrize(
    ("operation", "request_", "expected"),
    [
        # search and context
        ("search", {}, "field `query` must be a bounded string"),
        ("search", {"query": 5}, "field `query` must be a bounded string"),
        ("search", {"query": ""}, "field `query` must be a bounded string"),
        ("search", {"query": "x" * 2049}, "query is too long"),
        ("search", {"query": "é" * 1100}, "query is too long"),
        ("search", {"query": "x", "limit": "5"}, "field `limit` must be an integer"),
        ("search", {"query": "x", "limit": -1}, "field `limit` must not be negative"),
        ("search", {"query": "x", "limit": 2.5}, "field `limit` must be an integer"),
        ("search", {"query": 5, "limit": "x"}, "field `query` must be a bounded string"),
        ("context", {"query": "x", "budget": None}, "field `budget` must be an integer"),
        ("search", {"query": "x", "scope": "global", "scopes": ["global"]}, "use either scope or scopes, not both"),
        ("search", {"query": "x", "scope": 5}, "scope must be a string"),
        ("search", {"query": "x", "scopes": "global"}, "scopes must be an array"),
        ("search", {"query": "x", "scopes": [5]}, "scopes must contain strings"),
        ("search", {"query": "x", "scopes": []}, "scope filter is out of bounds"),
        ("search", {"query": "x", "scopes": ["global"] * 17}, "scope filter is out of bounds"),
        ("search", {"query": "x", "access": "robot"}, "access must be `agent` or `human`"),
        ("context", {"query": "x", "access": 5}, "access must be `agent` or `human`"),
        ("context", {"query": "x", "access": None}, "access must be `agent` or `human`"),
        # get, archive
        ("get", {}, "field `id` must be a bounded string"),
        ("get", {"id": 5}, "field `id` must be a bounded string"),
        ("get", {"id": ""}, "field `id` must be a bounded string"),
        ("get", {"id": "42"}, "id must be a valid record identifier"),
        ("get", {"id": "00000000-0000-0000-0000-000000000000"}, "id must be a valid record identifier"),
        ("archive", {"id": " " + LOCKFILE_ID}, "id must be a valid record identifier"),
        # remember
        ("remember", {"kind": "fact", "body": "b"}, "field `title` is required"),
        ("remember", {"title": "t", "body": "b"}, "field `kind` is required"),
        ("remember", {"title": "t", "kind": "fact"}, "field `body` is required"),
        ("remember", {"title": 5, "kind": "fact", "body": "b"}, "field `title` must be a bounded string"),
        ("remember", {"title": "é" * 40000, "kind": "fact", "body": "b"}, "field `title` must be a bounded string"),
        ("remember", {"title": "t", "kind": "idea", "body": "b"}, "kind is invalid"),
        ("remember", {"title": "t", "kind": "fact", "body": "b", "scope": "project:a b"}, "scope is invalid"),
        ("remember", {"title": "t", "kind": "fact", "body": "b", "tags": "x"}, "field `tags` must be an array"),
        (
            "remember",
            {"title": "t", "kind": "fact", "body": "b", "aliases": [""]},
            "record collection contains an invalid string",
        ),
        (
            "remember",
            {"title": "t", "kind": "fact", "body": "b", "tags": ["é" * 300]},
            "record collection contains an invalid string",
        ),
        (
            "remember",
            {"title": "t", "kind": "fact", "body": "b", "tags": ["x"] * 129},
            "record collection is too large",
        ),
        ("remember", {"title": "t", "kind": "fact", "body": "b", "source": "s"}, "source must be an object"),
        (
            "remember",
            {"title": "t", "kind": "fact", "body": "b", "source": {"reference": "r", "actor": "a"}},
            "source kind is required",
        ),
        (
            "remember",
            {"title": "t", "kind": "fact", "body": "b", "source": {**SOURCE, "kind": "chat"}},
            "source kind is invalid",
        ),
        (
            "remember",
            {"title": "t", "kind": "fact", "body": "b", "source": {**SOURCE, "reference": ""}},
            "source reference is invalid",
        ),
        (
            "remember",
            {"title": "t", "kind": "fact", "body": "b", "source": {**SOURCE, "actor": "é" * 200}},
            "source actor is invalid",
        ),
        (
            "remember",
            {"title": "t", "kind": "fact", "body": "b", "source": {**SOURCE, "observed_at": 5}},
            "source observed_at is invalid",
        ),
        (
            "remember",
            {"title": "t", "kind": "fact", "body": "b", "source": {**SOURCE, "observed_at": "2026-03-14"}},
            "source observed_at must be an RFC 3339 timestamp",
        ),
        (
            "remember",
            {"title": "t", "kind": "fact", "body": "b", "source": {**SOURCE, "revision": ""}},
            "source revision is invalid",
        ),
        (
            "remember",
            {"title": "t", "kind": "fact", "body": "b", "source": {**SOURCE, "content_hash": "h" * 257}},
            "source content_hash is invalid",
        ),
        (
            "remember",
            {"title": "t", "kind": "fact", "body": "b", "source": {**SOURCE, "extra": 1}},
            "request contains an unknown field",
        ),
        ("remember", {"title": "t", "kind": "fact", "body": "b", "actor": 5}, "actor must be `agent` or `human`"),
        # propose
        ("propose", {"record": []}, "record must be a JSON object"),
        ("propose", {"record": {**RECORD, "id": 5}}, "id must be a valid record identifier"),
        ("propose", {**RECORD, "id": ""}, "id must be a valid record identifier"),
        ("propose", {**RECORD, "status": "draft"}, "status is invalid"),
        ("propose", {**RECORD, "access": "robot"}, "access is invalid"),
        ("propose", {**RECORD, "created_at": 5}, "field `created_at` must be a timestamp"),
        ("propose", {**RECORD, "updated_at": "yesterday"}, "field `updated_at` is not RFC 3339"),
        ("propose", {**RECORD, "supersedes": "x"}, "field `supersedes` must be an array"),
        ("propose", {**RECORD, "supersedes": [5]}, "record id collection contains an invalid value"),
        ("propose", {**RECORD, "supersedes": ["x"]}, "id must be a valid record identifier"),
        ("propose", {**RECORD, "sources": {}}, "sources must be an array"),
        ("propose", {**RECORD, "sources": [SOURCE] * 33}, "too many sources"),
        ("propose", {**RECORD, "sources": [5]}, "source must be an object"),
        ("propose", {"record": {k: v for k, v in RECORD.items() if k != "access"}}, "field `access` is required"),
        ("propose", {"record": {k: v for k, v in RECORD.items() if k != "title"}}, "field `title` is required"),
        ("propose", {"record": {**RECORD, "body": "é" * 40000}}, "field `body` must be a bounded string"),
        ("propose", {**RECORD, "actor": "robot"}, "actor must be `agent` or `human`"),
        # update, supersede
        ("update", {"id": LOCKFILE_ID, "kind": "idea"}, "kind is invalid"),
        ("supersede", {"id": LOCKFILE_ID, "replacement": 5}, "record must be a JSON object"),
        ("supersede", {"id": LOCKFILE_ID, "replacement": {"scope": "nowhere"}}, "scope is invalid"),
    ],
)
def test_invalid_requests_get_the_catalogue_message(
    store: Store, operation: str, request_: dict, expected: str
) -> None:
    envelope = store.handle(operation, {"version": 1, **request_})
    assert error(envelope) == ("invalid_request", expected)


def test_messages_never_echo_values(store: Store) -> None:
    marker = "zq-marker-value"
    requests = [
        ("search", {"query": 5, "scope": marker}),
        ("get", {"id": marker}),
        ("search", {"query": "x", marker: 1}),
        ("remember", {"title": "t", "kind": marker, "body": "b"}),
        ("propose", {**RECORD, "status": marker}),
    ]
    for operation, request_ in requests:
        assert marker not in encode(store.handle(operation, {"version": 1, **request_}))


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ({"limit": 0}, (1, 512)),
        ({"limit": 1000}, (100, 512)),
        ({"budget": 0}, (20, 1)),
        ({"budget": 10_000}, (20, 4096)),
        ({}, (20, 512)),
    ],
)
def test_limit_and_budget_are_clamped_not_refused(store: Store, request_: dict, expected: tuple[int, int]) -> None:
    envelope = store.handle("context", {"version": 1, "query": "archive", **request_})
    assert envelope["ok"] and envelope["result"]["receipt"]["budget"] == expected[1]
    hits = store.handle("search", {"version": 1, "query": "the", "limit": request_.get("limit", 20)})["result"]
    assert len(hits) <= expected[0]


def test_multibyte_query_within_the_byte_limit_is_accepted(store: Store) -> None:
    assert store.handle("search", {"version": 1, "query": "é" * 1024})["ok"]


def test_scope_filter_rules(store: Store) -> None:
    denied = ("scope_denied", "requested scope is outside the selected store boundary")
    assert error(store.handle("search", {"version": 1, "query": "x", "scope": "project:other"})) == denied
    assert error(store.handle("search", {"version": 1, "query": "x", "scopes": [PROJECT_SCOPE, "bad scope"]})) == denied
    assert error(store.handle("get", {"version": 1, "id": BACKUP_ID, "scope": "global"}, view=View.LOCAL)) == denied
    narrowed = store.handle("context", {"version": 1, "query": "x", "scopes": [PROJECT_SCOPE, PROJECT_SCOPE]})
    assert narrowed["result"]["receipt"]["scopes"] == [PROJECT_SCOPE, PROJECT_SCOPE]  # kept as given


def test_an_uninitialized_global_store_without_a_scope_is_out_of_bounds(store: Store) -> None:
    envelope = store.handle("search", {"version": 1, "query": "x"}, view=View.GLOBAL)
    assert error(envelope) == ("invalid_request", "scope filter is out of bounds")
    assert not store.global_root.exists()


def test_access_and_actor_guards(store: Store) -> None:
    human = ("permission_denied", "the invoke protocol is limited to agent-readable records")
    for operation, request_ in [
        ("search", {"query": "x"}),
        ("context", {"query": "x"}),
        ("get", {"id": BACKUP_ID}),
        ("archive", {"id": BACKUP_ID}),
        ("supersede", {"id": BACKUP_ID}),
    ]:
        assert error(store.handle(operation, {"version": 1, "access": "human", **request_})) == human
    write = ("permission_denied", "agent writes always require explicit human approval")
    remember = {"version": 1, "title": "t", "kind": "fact", "body": "b", "source": SOURCE}
    for extra in ({"actor": "human"}, {"actor": "robot"}, {"approved": False}, {"approved": True}):
        assert error(store.handle("remember", {**remember, **extra})) == write
        assert error(store.handle("update", {"version": 1, "id": BACKUP_ID, "body": "b", **extra})) == write
    proposal = ("permission_denied", "invoke proposals always require explicit human approval")
    for extra in ({"actor": "human"}, {"approved": None}, {"actor": "agent", "approved": True}):
        assert error(store.handle("propose", {"version": 1, **RECORD, **extra})) == proposal
    agent_only = ("permission_denied", "agent invocations may only write agent-accessible records")
    assert error(store.handle("propose", {"version": 1, **RECORD, "access": "human"})) == agent_only
    assert (
        error(store.handle("supersede", {"version": 1, "id": BACKUP_ID, "replacement": {"access": "human"}}))
        == agent_only
    )
    for operation in ("supersede", "archive"):
        assert error(store.handle(operation, {"version": 1, "id": BACKUP_ID, "actor": "agent"})) == UNKNOWN
    assert store.sbuf_markdown_files() == sorted(store.records.glob("*.md")) and len(store.sbuf_markdown_files()) == 4


def test_handle_accepts_parsed_objects_and_never_raises(store: Store) -> None:
    session = store.session()
    assert handle("search", {"version": 1, "query": "archive"}, session)["ok"]
    broken = store.session(embedder=NoEmbedder())
    broken.selected = None  # type: ignore[assignment]
    envelope = handle("search", {"version": 1, "query": "archive"}, broken)
    assert envelope["error"] == {"code": "internal_error", "message": "the store operation failed"}


def test_encoding_is_compact_sorted_and_keeps_unicode() -> None:
    text = encode({"version": 1, "ok": True, "operation": "get", "result": {"title": "Grüße ✓", "b": 1, "a": 2}})
    assert text == '{"ok":true,"operation":"get","result":{"a":2,"b":1,"title":"Grüße ✓"},"version":1}'

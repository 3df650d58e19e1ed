"""JSON ↔ MCP equivalence: a tool's `structuredContent` is exactly what `sbuf invoke` prints.

Two identical copies of one seeded store take the same sequence of requests, one through
`sbuf --project invoke <operation>`, the other through the MCP tools (all writes granted), and the
envelopes are compared after masking what is fresh on every call: receipt ids, retrieval and
creation times, and ids of newly written records (numbered in order of appearance, so a later
`related_id` must still point at the same new record on both sides).

Every test runs on both engines: directory stores, and stores in PostgreSQL (a copy of the sandbox
gets a copy of its database).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from stormbuffer.conformance.engines import record_files
from stormbuffer.core.locks import exclusive_lock
from stormbuffer.core.stores import DATABASE_URL_ENV
from tests.helpers import Sandbox, record_markdown, sbuf_env

from .conftest import (
    ACTIVE_ID,
    ARCHIVED_ID,
    CANDIDATE_ID,
    ENGINES,
    GLOBAL_ID,
    HUMAN_ID,
    MISSING_ID,
    OPERATIONS,
    SECOND_ID,
    SOURCE,
    Store,
    connect,
    envelope,
)

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("store", ENGINES, indirect=True)]

SEEDED = {ACTIVE_ID, SECOND_ID, CANDIDATE_ID, ARCHIVED_ID, HUMAN_ID, GLOBAL_ID, MISSING_ID}
SEED_TIME = "2020-01-02T03:04:05Z"
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TOKEN = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6"
REMEMBER = {"title": "Deploy window", "kind": "decision", "body": "Deploy after noon on weekdays.", "source": SOURCE}
FRESH_SOURCE = {
    "kind": "document",
    "reference": "docs/release.md#window",
    "actor": "agent",
    "observed_at": "2026-08-13T12:34:56-05:00",
    "revision": "4f1c2a9",
    "content_hash": "blake3:0a1b2c",
}

# (label, tool, arguments, expected code, or "ok", or "ok:<proposal outcome>"). "{scope}" is the project scope.
CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("recall", "memory_recall", {"query": "magnetar", "budget": 128}, "ok"),
    ("recall one hit", "memory_recall", {"query": "release constraint", "limit": 1}, "ok"),
    ("recall global only", "memory_recall", {"query": "magnetar", "scope": "global"}, "ok"),
    ("recall both scopes", "memory_recall", {"query": "magnetar", "scopes": ["{scope}", "global"]}, "ok"),
    ("recall clamps", "memory_recall", {"query": "magnetar", "limit": 0, "budget": 100000}, "ok"),
    ("recall tiny budget", "memory_recall", {"query": "magnetar", "budget": 1}, "ok"),
    ("recall no terms", "memory_recall", {"query": "   "}, "ok"),
    ("recall agent access", "memory_recall", {"query": "private note", "access": "agent"}, "ok"),
    ("recall without query", "memory_recall", {"budget": 5}, "invalid_request"),
    ("recall long query", "memory_recall", {"query": "q" * 2049}, "invalid_request"),
    (
        "recall scope and scopes",
        "memory_recall",
        {"query": "x", "scope": "global", "scopes": ["global"]},
        "invalid_request",
    ),  # noqa: E501
    ("recall limit type", "memory_recall", {"query": "x", "limit": 1.5}, "invalid_request"),
    ("recall empty scopes", "memory_recall", {"query": "x", "scopes": []}, "invalid_request"),
    ("recall unknown key", "memory_recall", {"query": "x", "colour": "red"}, "invalid_request"),
    ("recall path key", "memory_recall", {"query": "x", "profile": "/home"}, "path_denied"),
    ("recall foreign scope", "memory_recall", {"query": "x", "scope": "project:elsewhere"}, "scope_denied"),
    ("recall human access", "memory_recall", {"query": "x", "access": "human"}, "permission_denied"),
    ("get active", "memory_get", {"id": ACTIVE_ID}, "ok"),
    ("get candidate", "memory_get", {"id": CANDIDATE_ID}, "ok"),
    ("get archived", "memory_get", {"id": ARCHIVED_ID}, "ok"),
    ("get global record", "memory_get", {"id": GLOBAL_ID}, "ok"),
    ("get urn form", "memory_get", {"id": f"urn:uuid:{ACTIVE_ID}"}, "ok"),
    ("get missing", "memory_get", {"id": MISSING_ID}, "not_found"),
    ("get bad id", "memory_get", {"id": "not-a-uuid"}, "invalid_request"),
    ("get human record", "memory_get", {"id": HUMAN_ID}, "access_denied"),
    ("get outside filter", "memory_get", {"id": ACTIVE_ID, "scope": "global"}, "scope_denied"),
    ("get global outside filter", "memory_get", {"id": GLOBAL_ID, "scope": "{scope}"}, "not_found"),
    ("get human access", "memory_get", {"id": ACTIVE_ID, "access": "human"}, "permission_denied"),
    ("get path key", "memory_get", {"id": ACTIVE_ID, "root": "/"}, "path_denied"),
    ("remember", "memory_remember", REMEMBER, "ok:requires_approval"),
    ("remember again", "memory_remember", REMEMBER, "ok:duplicate_of"),
    ("remember overlap", "memory_remember", {**REMEMBER, "body": "Deploy only before noon."}, "ok:possible_overlap"),
    (
        "remember sourced",
        "memory_remember",
        {**REMEMBER, "title": "Freeze", "source": FRESH_SOURCE, "tags": ["ops"]},
        "ok:requires_approval",
    ),  # noqa: E501
    (
        "remember unsourced",
        "memory_remember",
        {"title": "No source", "kind": "fact", "body": "Nothing cites this."},
        "ok:invalid",
    ),  # noqa: E501
    ("remember as human", "memory_remember", {**REMEMBER, "actor": "human"}, "permission_denied"),
    ("remember approved", "memory_remember", {**REMEMBER, "approved": False}, "permission_denied"),
    ("remember secret", "memory_remember", {**REMEMBER, "body": f"token {TOKEN}"}, "secret_detected"),
    ("remember global scope", "memory_remember", {**REMEMBER, "title": "Elsewhere", "scope": "global"}, "scope_denied"),
    ("remember bad kind", "memory_remember", {**REMEMBER, "kind": "rumour"}, "invalid_request"),
    ("remember source type", "memory_remember", {**REMEMBER, "source": "chat"}, "invalid_request"),
    ("remember access key", "memory_remember", {**REMEMBER, "access": "agent"}, "invalid_request"),
    ("remember path key", "memory_remember", {**REMEMBER, "file": "notes.md"}, "path_denied"),
    (
        "update",
        "memory_update",
        {"id": ACTIVE_ID, "body": "Releases ship on Wednesdays.", "source": SOURCE},
        "ok:requires_approval",
    ),  # noqa: E501
    (
        "update candidate",
        "memory_update",
        {"id": CANDIDATE_ID, "body": "Three people.", "source": SOURCE},
        "invalid_state",
    ),  # noqa: E501
    ("update unsourced", "memory_update", {"id": SECOND_ID, "body": "Run just build."}, "ok:invalid"),
    ("update missing", "memory_update", {"id": MISSING_ID, "body": "x", "source": SOURCE}, "not_found"),
    ("update human record", "memory_update", {"id": HUMAN_ID, "body": "x", "source": SOURCE}, "access_denied"),
    (
        "update secret",
        "memory_update",
        {"id": SECOND_ID, "body": f"Authorization: Bearer {TOKEN}", "source": SOURCE},
        "secret_detected",
    ),  # noqa: E501
    (
        "update foreign filter",
        "memory_update",
        {"id": SECOND_ID, "body": "x", "source": SOURCE, "scope": "project:elsewhere"},
        "scope_denied",
    ),  # noqa: E501
    ("update global record", "memory_update", {"id": GLOBAL_ID, "body": "x", "source": SOURCE}, "not_found"),
    ("update bad id", "memory_update", {"id": "12", "body": "x", "source": SOURCE}, "invalid_request"),
    ("forget", "memory_forget", {"id": SECOND_ID}, "ok"),
    ("forget again", "memory_forget", {"id": SECOND_ID}, "invalid_state"),
    ("forget missing", "memory_forget", {"id": MISSING_ID}, "not_found"),
    ("forget human record", "memory_forget", {"id": HUMAN_ID}, "access_denied"),
    ("forget global record", "memory_forget", {"id": GLOBAL_ID}, "not_found"),
    ("forget with actor", "memory_forget", {"id": ACTIVE_ID, "actor": "agent"}, "invalid_request"),
    ("forget human access", "memory_forget", {"id": ACTIVE_ID, "access": "human"}, "permission_denied"),
    ("recall after writes", "memory_recall", {"query": "magnetar release deploy", "budget": 256}, "ok"),
    ("get replaced record", "memory_get", {"id": ACTIVE_ID}, "ok"),
]


class Masker:
    """Replaces what differs between two runs of the same requests with stable placeholders."""

    def __init__(self, known: set[str]) -> None:
        self.known = known
        self.new_ids: dict[str, str] = {}

    def __call__(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {name: self(item, name) for name, item in value.items()}
        if isinstance(value, list):
            return [self(item, key) for item in value]
        if not isinstance(value, str):
            return value
        if key == "receipt_id":
            return "<receipt>"
        if key in ("retrieved_at", "created_at", "updated_at") and value != SEED_TIME:
            return "<now>"
        return UUID.sub(self._id, value)

    def _id(self, match: re.Match[str]) -> str:
        found = match.group(0)
        if found in self.known:
            return found
        return self.new_ids.setdefault(found, f"<new-{len(self.new_ids) + 1}>")


def differences(left: Any, right: Any, path: str = "") -> list[str]:
    """Where two JSON values differ, as `path: left != right` lines."""
    if isinstance(left, dict) and isinstance(right, dict):
        keys = sorted(set(left) | set(right))
        return [line for key in keys for line in differences(left.get(key), right.get(key), f"{path}/{key}")]
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        pairs = enumerate(zip(left, right, strict=True))
        return [line for i, (a, b) in pairs for line in differences(a, b, f"{path}/{i}")]
    return [] if left == right else [f"{path}: {left!r} != {right!r}"[:300]]


def outcome(answer: dict[str, Any]) -> str:
    if not answer["ok"]:
        return str(answer["error"]["code"])
    result = answer["result"]
    return f"ok:{result['outcome']}" if isinstance(result, dict) and "message" in result else "ok"


def with_scope(value: Any, scope: str) -> Any:
    if isinstance(value, dict):
        return {key: with_scope(item, scope) for key, item in value.items()}
    if isinstance(value, list):
        return [with_scope(item, scope) for item in value]
    return value.replace("{scope}", scope) if isinstance(value, str) else value


def twin(store: Store, base: Path) -> Store:
    """An identical copy of the sandbox (records, projections, configuration); the model is hard-linked."""

    def copy(source: str, destination: str) -> None:
        if f"{os.sep}models{os.sep}" in source:
            os.link(source, destination)
        else:
            shutil.copy2(source, destination)

    shutil.copytree(store.box.base, base, symlinks=True, copy_function=copy)
    env = sbuf_env(base)
    if store.copy_database is not None and store.database is not None:
        env[DATABASE_URL_ENV] = store.copy_database(store.database)
    return Store(Sandbox(base, env, base / store.box.cwd.relative_to(store.box.base)), store.copy_database)


async def test_structured_content_equals_sbuf_invoke(store: Store, tmp_path_factory: pytest.TempPathFactory) -> None:
    store.seed()
    through_mcp = twin(store, tmp_path_factory.mktemp("twin") / "sandbox")
    scope = store.scope
    assert through_mcp.scope == scope
    known = SEEDED | {scope.removeprefix("project:")}
    cli_masker, mcp_masker = Masker(known), Masker(known)
    async with connect(through_mcp.box, "--project", "--allow-writes") as client:
        for label, tool, arguments, expected in CASES:
            request = with_scope(arguments, scope)
            from_mcp = envelope(await client.call_tool(tool, request))
            from_cli = store.invoke(OPERATIONS[tool], {**request, "version": 1}, "--project")
            assert outcome(from_cli) == expected, (label, from_cli)
            masked_mcp, masked_cli = mcp_masker(from_mcp), cli_masker(from_cli)
            assert masked_mcp == masked_cli, (label, differences(masked_mcp, masked_cli))
    assert len(cli_masker.new_ids) == len(mcp_masker.new_ids) > 0
    written = stored_records(store, cli_masker)
    assert written == stored_records(through_mcp, mcp_masker)
    assert len(written) > len(SEEDED) - 2  # the project's seeded records and the new ones


def stored_records(store: Store, masker: Masker) -> dict[str, str]:
    """The project store's records (file name → text), read through its engine, masked as the envelopes are."""
    found = record_files(store.box.project_root, store.box.env)
    return {masker(name): TIME.sub(_fresh_time, masker(data.decode())) for name, data in found.items()}


def _fresh_time(match: re.Match[str]) -> str:
    return match.group(0) if match.group(0) == SEED_TIME else "<now>"


@contextmanager
def mutation_lock_held(store: Store) -> Iterator[None]:
    """The store's write lock, held elsewhere: the mutation lock file, or the database's advisory lock."""
    if store.database is None:
        with exclusive_lock(store.box.project_root / "locks" / "mutation.lock"):
            yield
        return
    with psycopg.connect(store.database, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtextextended('stormbuffer:records:' || %s, 0))", [store.scope])
        yield


def plant_invalid_record(store: Store, record_id: str) -> Callable[[], None]:
    """An unreadable record (an unknown kind) where the store keeps its records: a file, or a row put
    there by hand; returns its removal."""
    text = record_markdown(record_id, store.scope, kind="rumour")
    if store.database is None:
        bad_file = store.box.project_root / "records" / f"{record_id}.md"
        bad_file.write_text(text, encoding="utf-8")
        return bad_file.unlink
    row = (store.scope, record_id, f"records/{record_id}.md", text.encode(), store.scope, "rumour", "active", "x", "x")
    with psycopg.connect(store.database, autocommit=True) as conn:
        conn.execute("INSERT INTO stormbuffer.records (store, id, path, markdown, scope, kind, status, title, "
                     "title_key, version) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 1)", row)  # fmt: skip

    def remove() -> None:
        with psycopg.connect(store.database or "", autocommit=True) as conn:
            conn.execute("DELETE FROM stormbuffer.records WHERE store = %s AND id = %s", [store.scope, record_id])

    return remove


def block_projection(store: Store) -> None:
    """The projection cannot be read: a directory where the SQLite file belongs, or its chunks table gone."""
    if store.database is None:
        index = store.box.project_root / "index.sqlite3"
        for path in store.box.project_root.glob("index.sqlite3*"):
            path.unlink()
        index.mkdir()
        return
    with psycopg.connect(store.database, autocommit=True) as conn:
        conn.execute("ALTER TABLE stormbuffer.projection_chunks RENAME TO projection_chunks_gone")


async def test_store_failures_are_equal_too(store: Store) -> None:
    """Failures that depend on the store's state: busy lock, invalid Markdown, blocked projection."""
    store.seed()
    async with connect(store.box, "--project", "--allow-writes") as client:

        async def both(tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
            from_mcp = envelope(await client.call_tool(tool, arguments))
            return from_mcp, store.invoke(OPERATIONS[tool], {**arguments, "version": 1}, "--project")

        with mutation_lock_held(store):
            busy = await both("memory_remember", REMEMBER)
        remove = plant_invalid_record(store, MISSING_ID)
        invalid = await both("memory_get", {"id": MISSING_ID})  # the invalid record's own id: never served
        remove()
        block_projection(store)
        blocked = await both("memory_recall", {"query": "magnetar"})
    for (from_mcp, from_cli), code in ((busy, "conflict"), (invalid, "invalid_record"), (blocked, "internal_error")):
        assert from_mcp == from_cli
        assert from_cli["error"]["code"] == code
        assert str(store.box.base) not in str(from_cli)


async def test_views_are_equal_too(store: Store) -> None:
    """The global and local views, and an uninitialized project."""
    store.seed()
    requests = [
        ("memory_get", {"id": GLOBAL_ID}),
        ("memory_get", {"id": ACTIVE_ID}),
        ("memory_recall", {"query": "magnetar"}),
    ]  # noqa: E501
    for flag in ("--global", "--local"):
        async with connect(store.box, flag) as client:
            for tool, arguments in requests:
                known = SEEDED | {store.scope.removeprefix("project:")}
                from_mcp = Masker(known)(envelope(await client.call_tool(tool, arguments)))
                from_cli = Masker(known)(store.invoke(OPERATIONS[tool], {**arguments, "version": 1}, flag))
                assert from_mcp == from_cli, (flag, tool, arguments)
    elsewhere = store.box.base / "elsewhere"
    elsewhere.mkdir()
    async with connect(store.box, "--project", cwd=elsewhere) as client:
        from_mcp = envelope(await client.call_tool("memory_get", {"id": ACTIVE_ID}))
    request = envelope_text({"version": 1, "id": ACTIVE_ID})
    done = store.box.sbuf("--project", "invoke", "get", cwd=elsewhere, input=request)
    assert from_mcp["error"]["code"] == "not_initialized"
    assert done.stdout.strip() == envelope_text(from_mcp)
    assert not (elsewhere / ".sbuf").exists()


def envelope_text(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

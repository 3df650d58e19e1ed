"""A long-running adapter reads without a full sync check, yet sees record files changed on disk.

The adapter watches the records directories; a change reaches it a few tens of milliseconds
later, so after each change the test recalls until the change shows (the guard only stops a hang).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession

from tests.helpers import record_markdown

from .conftest import ACTIVE_ID, MISSING_ID, Store, call, connect

pytestmark = pytest.mark.anyio

GUARD_S = 10.0


async def recall(client: ClientSession, query: str) -> list[dict[str, Any]]:
    answer = await call(client, "memory_recall", {"query": query, "budget": 4096})
    assert answer["ok"], answer
    assert answer["result"]["receipt"]["retrieval_mode"] == "hybrid"
    blocks: list[dict[str, Any]] = answer["result"]["blocks"]
    return blocks


async def recall_until(
    client: ClientSession, query: str, done: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """Recall `query` until `done` holds for its blocks (or the guard time passed)."""
    deadline = time.monotonic() + GUARD_S
    while not done(blocks := await recall(client, query)) and time.monotonic() < deadline:
        await anyio.sleep(0.02)
    return blocks


def text_of(blocks: list[dict[str, Any]], record_id: str) -> str:
    return " ".join(block["text"] for block in blocks if block["record_id"] == record_id)


def last_sync(store: Store) -> str:
    with sqlite3.connect(store.box.project_root / "index.sqlite3") as conn:
        row = conn.execute("SELECT value FROM metadata WHERE key = 'last_sync'").fetchone()
    return str(row[0])


async def test_recall_sees_edits_creations_and_deletions_on_disk(store: Store) -> None:
    store.seed()
    async with connect(store.box, "--project") as client:
        assert "magnetar check" in text_of(await recall(client, "release constraint"), ACTIVE_ID)
        synced_at = last_sync(store)
        for _ in range(3):  # nothing changed: no sync runs, not even its no-change check
            assert "magnetar check" in text_of(await recall(client, "release constraint"), ACTIVE_ID)
        assert last_sync(store) == synced_at

        path = store.box.project_root / "records" / f"{ACTIVE_ID}.md"
        path.write_text(
            record_markdown(ACTIVE_ID, store.scope, access="agent", title="Release constraint",
                            body="Releases ship on Thursdays after the quasar audit.\n"),
            encoding="utf-8",
        )  # fmt: skip
        blocks = await recall_until(client, "release constraint", lambda b: "quasar" in text_of(b, ACTIVE_ID))
        assert "quasar audit" in text_of(blocks, ACTIVE_ID)
        assert "magnetar" not in text_of(blocks, ACTIVE_ID)

        store.write(MISSING_ID, title="Nebula runbook", body="Restart the nebula relay before noon.\n")
        blocks = await recall_until(client, "nebula relay", lambda b: bool(text_of(b, MISSING_ID)))
        assert "nebula relay" in text_of(blocks, MISSING_ID)

        (store.box.project_root / "records" / f"{MISSING_ID}.md").unlink()
        blocks = await recall_until(client, "nebula relay", lambda b: not text_of(b, MISSING_ID))
        # No other record is about a nebula relay: focused context may give no block at all.
        assert all(block["record_id"] != MISSING_ID for block in blocks)


async def test_a_write_through_the_adapter_is_read_at_once(store: Store) -> None:
    store.seed()
    async with connect(store.box, "--project", "--allow-writes") as client:
        assert text_of(await recall(client, "release constraint"), ACTIVE_ID)
        archived = await call(client, "memory_forget", {"id": ACTIVE_ID})
        assert archived["ok"], archived
        blocks = await recall(client, "release constraint")  # no wait: the write itself marks the store
        assert all(block["record_id"] != ACTIVE_ID for block in blocks)

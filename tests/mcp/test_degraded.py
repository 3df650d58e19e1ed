"""One invalid record file over MCP: recall and get answer from the valid records, the receipt names
the file, and a write that the file could collide with is refused naming it (a real SDK client)."""

from __future__ import annotations

import pytest

from .conftest import ACTIVE_ID, MISSING_ID, SOURCE, Store, call, connect

pytestmark = pytest.mark.anyio

BROKEN = '+++\ntitle = "Deploy window\n+++\n'


async def test_recall_and_get_stay_up_and_the_receipt_names_the_invalid_file(store: Store) -> None:
    store.seed()
    broken = store.box.project_root / "records" / f"{MISSING_ID}.md"
    broken.write_text(BROKEN, encoding="utf-8")
    async with connect(store.box, "--project", "--allow-writes") as client:
        recalled = await call(client, "memory_recall", {"query": "magnetar release"})
        got = await call(client, "memory_get", {"id": ACTIVE_ID})
        own = await call(client, "memory_get", {"id": MISSING_ID})
        unrelated = await call(client, "memory_remember", {"title": "Lunch", "kind": "fact", "body": "Noon.",
                                                           "source": SOURCE})  # fmt: skip
        colliding = await call(client, "memory_remember", {"title": "Deploy window", "kind": "fact",
                                                           "body": "After noon.", "source": SOURCE})  # fmt: skip
    receipt = recalled["result"]["receipt"]
    assert receipt["degraded"] == {"invalid_files": [{"store": "project", "path": f"records/{MISSING_ID}.md"}]}
    assert ACTIVE_ID in {block["record_id"] for block in recalled["result"]["blocks"]}
    assert got["result"]["id"] == ACTIVE_ID
    assert own["error"]["code"] == "invalid_record"
    assert unrelated["ok"]
    message = f"record file records/{MISSING_ID}.md is invalid; repair it before this write"
    assert colliding["error"] == {"code": "invalid_record", "message": message}
    assert broken.read_text(encoding="utf-8") == BROKEN

"""One memory daemon serves callers whose environments name different PostgreSQL databases: each MCP
session and each `sbuf invoke` reads and writes the database of its own caller's environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stormbuffer.conformance.engines import record_files
from stormbuffer.core.stores import DATABASE_URL_ENV
from stormbuffer.daemon import relay
from tests.helpers import Sandbox, link_tree
from tests.mcp.conftest import SOURCE, call, connect
from tests.postgres import PostgresServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_each_caller_reaches_its_own_database(
    tmp_path: Path, acquired_models: Path, postgres_server: PostgresServer
) -> None:
    runtime = tmp_path / "run"  # shared, as one user's shells share it: one daemon for both
    runtime.mkdir(mode=0o700)
    boxes = []
    for name in ("ann", "bob"):
        box = Sandbox.create(tmp_path / name)
        link_tree(acquired_models, box.base / "cache" / "stormbuffer" / "models")
        box.env.update({DATABASE_URL_ENV: postgres_server.create_database(), "XDG_RUNTIME_DIR": str(runtime)})
        done = box.sbuf("--project", "init", "--engine", "postgresql")
        assert done.returncode == 0, done.stderr
        boxes.append(box)
    ids = []
    for box in boxes:
        title = f"Rule of {box.base.name}"
        async with connect(box, "--project", "--allow-writes") as client:
            proposed = await call(client, "memory_remember", {"title": title, "kind": "fact", "body": f"{title}.",
                                                                 "source": SOURCE})  # fmt: skip
            assert proposed["ok"], proposed
            ids.append(proposed["result"]["record_id"])
    stored = [list(record_files(box.project_root, box.env).values()) for box in boxes]
    assert [len(records) for records in stored] == [1, 1]
    assert b"Rule of ann" in stored[0][0] and b"Rule of bob" in stored[1][0]
    for box, own, other in ((boxes[1], ids[1], ids[0]), (boxes[0], ids[0], ids[1])):
        codes = [get(box, record_id) for record_id in (own, other)]
        assert codes == ["ok", "not_found"]
    status = relay.ask("status", boxes[1].env)
    assert status is not None and status["served"] >= 6  # both sessions and the four gets went through it


def get(box: Sandbox, record_id: str) -> str:
    done = box.sbuf("--project", "invoke", "get", input=json.dumps({"version": 1, "id": record_id}))
    envelope = json.loads(done.stdout)
    return "ok" if envelope["ok"] else str(envelope["error"]["code"])

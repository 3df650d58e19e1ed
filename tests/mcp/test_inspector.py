"""A third-party client: the MCP Inspector CLI lists the tools and calls memory_recall and memory_get.

The Inspector and the Node.js it needs are pinned in `tests/tools/package.json` and installed on first
use (`tests/tools.py`).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from ..tools import tool_command
from .conftest import ACTIVE_ID, STORMBUFFER_MCP, TIMEOUT, Store


def inspect(store: Store, *args: str) -> dict[str, Any]:
    """Run one Inspector CLI method against `stormbuffer-mcp --stdio --project`; its JSON result."""
    env = store.box.env
    server_env = [f"{name}={env[name]}" for name in ("HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")]
    command = [*tool_command("mcp-inspector"), "--cli", "--format", "json", "--quiet", "--cwd", str(store.box.cwd)]
    for assignment in server_env:
        command += ["-e", assignment]
    command += [*args, "--", str(STORMBUFFER_MCP), "--stdio", "--project"]
    done = subprocess.run(
        command, cwd=store.box.cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT * 2, check=False
    )
    assert done.returncode == 0, done.stderr
    output: dict[str, Any] = json.loads(done.stdout)
    return output["result"]


def test_inspector_lists_the_tools_and_calls_recall_and_get(store: Store) -> None:
    store.seed()
    listed = inspect(store, "--method", "tools/list")
    assert sorted(tool["name"] for tool in listed["tools"]) == [
        "memory_forget", "memory_get", "memory_recall", "memory_remember", "memory_update",
    ]  # fmt: skip

    arguments = json.dumps({"query": "when do releases ship", "budget": 64})
    recall = inspect(store, "--method", "tools/call", "--tool-name", "memory_recall", "--tool-args-json", arguments)
    assert recall["isError"] is False
    assert json.loads(recall["content"][0]["text"]) == recall["structuredContent"]
    assert recall["structuredContent"]["operation"] == "context"
    assert recall["structuredContent"]["result"]["blocks"][0]["record_id"] == ACTIVE_ID

    arguments = json.dumps({"id": ACTIVE_ID})
    got = inspect(store, "--method", "tools/call", "--tool-name", "memory_get", "--tool-args-json", arguments)
    assert got["isError"] is False
    assert got["structuredContent"] == store.invoke("get", {"version": 1, "id": ACTIVE_ID}, "--project")

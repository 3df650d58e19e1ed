"""Real-host acceptance: the Codex CLI (pinned in tests/tools) runs `codex exec` with
`stormbuffer-mcp --stdio --project` configured and its model provider pointed at the loopback stub
of the Responses API (tests/hosts). With the daemon warm, the first model request lists the five
memory tools every time, and the recall's result (a seeded record's id) reaches the next request."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cli.conftest import acquired_models, sandbox  # noqa: F401 - fixtures
from tests.daemon.sessions import session
from tests.hosts.model_stub import ModelStub, Reply
from tests.mcp.conftest import ACTIVE_ID, Store, store  # noqa: F401 - fixture
from tests.tools import tool_command

RUNS = 10
TIMEOUT_S = 180.0  # a guard against a hung host, never a speed assertion
TOOLS = ("memory_recall", "memory_get", "memory_remember", "memory_update", "memory_forget")
SERVER = "stormbuffer"


def codex_home(store: Store, base_url: str) -> Path:  # noqa: F811
    """A CODEX_HOME whose config points the model at the stub and starts the adapter in the project."""
    home = store.box.base / "codex-home"
    home.mkdir(exist_ok=True)
    passed = {name: store.box.env[name] for name in ("HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")}
    adapter = Path(sys.executable).parent / "stormbuffer-mcp"
    config = "\n".join([
        'model = "stub-model"',
        'model_provider = "stub"',
        'approval_policy = "never"',
        'sandbox_mode = "read-only"',
        "[model_providers.stub]",
        'name = "stub"',
        f"base_url = {json.dumps(base_url)}",
        'wire_api = "responses"',
        'env_key = "STUB_API_KEY"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        f"[mcp_servers.{SERVER}]",
        f"command = {json.dumps(str(adapter))}",
        'args = ["--stdio", "--project"]',
        f"cwd = {json.dumps(str(store.box.cwd))}",
        "startup_timeout_sec = 60",
        f"env = {{ {', '.join(f'{key} = {json.dumps(value)}' for key, value in passed.items())} }}",
    ])  # fmt: skip
    (home / "config.toml").write_text(config + "\n", encoding="utf-8")
    return home


def run_codex(store: Store) -> ModelStub:  # noqa: F811
    """One `codex exec` whose model calls `memory_recall` once and then answers."""
    recall = Reply.call("memory_recall", {"query": "release constraint"}, namespace=f"mcp__{SERVER}")
    with ModelStub([recall, Reply.text_reply("Releases ship on Tuesdays.")]) as stub:
        env = store.box.env_with(CODEX_HOME=str(codex_home(store, stub.base_url)), STUB_API_KEY="stub-key")
        done = subprocess.run(
            [*tool_command("codex"), "exec", "--skip-git-repo-check", "When do releases ship?"],
            cwd=store.box.cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return stub


def listed_tools(body: dict[str, Any]) -> list[str]:
    """The memory tools among the tools a model request offers."""
    offered = json.dumps(body.get("tools", []))
    return [name for name in TOOLS if f'"{name}"' in offered]


def test_codex_sees_the_memory_tools_on_its_first_request_and_gets_the_recall(store: Store) -> None:  # noqa: F811
    store.seed()
    assert store.box.sbuf("--project", "sync").returncode == 0
    assert session(store.box)[0] == 0  # the daemon is running, its SDK imported and its model open
    for run in range(RUNS):
        stub = run_codex(store)
        requests = stub.responses()
        assert len(requests) >= 2, f"run {run}: {len(requests)} model requests"
        assert listed_tools(requests[0].body) == list(TOOLS), f"run {run}: {listed_tools(requests[0].body)}"
        assert ACTIVE_ID in requests[1].text, f"run {run}: the recall's result did not reach the model"

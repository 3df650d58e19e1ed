"""Driving the real Codex CLI (pinned in tests/tools) against `stormbuffer-mcp` and the loopback
model stub of tests/hosts: its configuration and one `codex exec` whose model recalls once."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.hosts.model_stub import ModelStub, Reply, Request
from tests.tools import tool_command

SERVER = "stormbuffer"
TOOLS = ("memory_recall", "memory_get", "memory_remember", "memory_update", "memory_forget")
TIMEOUT_S = 180.0  # a guard against a hung host, never a speed assertion
PASSED_ENV = ("HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "STORMBUFFER_NO_DAEMON")


def write_config(home: Path, base_url: str, project: Path, env: Mapping[str, str]) -> None:
    """`home/config.toml`: the model at the stub, `stormbuffer-mcp --stdio --project` started in
    `project` with the variables that select the stores."""
    home.mkdir(parents=True, exist_ok=True)
    passed = {name: env[name] for name in PASSED_ENV if name in env}
    adapter = Path(sys.executable).parent / "stormbuffer-mcp"
    lines = [
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
        f"cwd = {json.dumps(str(project))}",
        "startup_timeout_sec = 60",
        f"env = {{ {', '.join(f'{key} = {json.dumps(value)}' for key, value in passed.items())} }}",
    ]
    (home / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_codex(project: Path, env: Mapping[str, str], home: Path) -> list[Request]:
    """One `codex exec` in `project` whose model calls `memory_recall` once, then answers; the
    model requests it sent, in order."""
    recall = Reply.call("memory_recall", {"query": "release constraint"}, namespace=f"mcp__{SERVER}")
    with ModelStub([recall, Reply.text_reply("Releases ship on Tuesdays.")]) as stub:
        write_config(home, stub.base_url, project, env)
        done = subprocess.run(
            [*tool_command("codex"), "exec", "--skip-git-repo-check", "When do releases ship?"],
            cwd=project, env={**env, "CODEX_HOME": str(home), "STUB_API_KEY": "stub-key"},
            capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return stub.responses()


def listed_tools(body: Any) -> list[str]:
    """The memory tools among the tools a model request offers."""
    offered = json.dumps(body.get("tools", []) if isinstance(body, dict) else [])
    return [name for name in TOOLS if f'"{name}"' in offered]

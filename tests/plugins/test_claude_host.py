"""The real Claude Code CLI (pinned, from npm) with the plugin installed by `sbuf plugin install
claude`, against a loopback stub of the Anthropic Messages API: recall reaches the first model
request, the Stop hook's capture review causes a follow-up turn in which a `memory_remember`
leaves exactly one candidate, and with Stormbuffer unreachable the turn still completes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.helpers import run_sbuf
from tests.hosts.model_stub import ModelStub
from tests.plugins.conftest import (
    HOST_TIMEOUT_S,
    HostSandbox,
    assert_not_recalled,
    assert_recalled,
    assert_reviewed_once,
    review_model,
    tool_requests,
)

TOOL = "mcp__plugin_stormbuffer_stormbuffer__memory_remember"
TITLE = "Magnetar hotfix window"
PROMPT = "What is the magnetar release rule?"
MODEL = review_model(TOOL, TITLE, "claude-capture-review")


def _claude(box: HostSandbox, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["claude", "-p", PROMPT, "--output-format", "json", "--allowedTools", TOOL],
        cwd=box.work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=HOST_TIMEOUT_S, check=False,
    )  # fmt: skip


def _env(box: HostSandbox, home: Path, base_url: str) -> dict[str, str]:
    home.mkdir(exist_ok=True)
    return {**box.env, "CLAUDE_CONFIG_DIR": str(home), "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "stub",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}  # fmt: skip


def test_claude_recalls_before_the_prompt_and_captures_one_candidate(host_sandbox: HostSandbox) -> None:
    box = host_sandbox
    before = box.candidates()
    with ModelStub(MODEL, api="anthropic") as stub:
        env = _env(box, box.base / "claude-home", stub.base_url)
        installed = run_sbuf("plugin", "install", "claude", cwd=box.work, env=env)
        assert installed.returncode == 0, installed.stderr
        ran = _claude(box, env)
    requests = tool_requests(stub.responses())
    log = ran.stdout[-3000:] + ran.stderr[-3000:]
    assert ran.returncode == 0, log
    assert len(requests) >= 3, log
    assert_recalled(box, requests[0])
    assert_reviewed_once(box, requests, before, TITLE)


def test_claude_completes_its_turn_when_stormbuffer_is_unreachable(host_sandbox: HostSandbox) -> None:
    box = host_sandbox
    with ModelStub(MODEL, api="anthropic") as stub:
        env = _env(box, box.base / "claude-home", stub.base_url)
        installed = run_sbuf("plugin", "install", "claude", cwd=box.work, env=env)
        assert installed.returncode == 0, installed.stderr
        ran = _claude(box, {**env, "STORMBUFFER_BIN": str(box.base / "no-such-sbuf")})
    requests = tool_requests(stub.responses())
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert json.loads(ran.stdout)["result"]
    assert requests
    assert_not_recalled(box, requests[0])

"""The real Claude Code CLI (pinned, from npm) with the plugin installed by `sbuf plugin install
claude`, against a loopback stub of the Anthropic Messages API: recall reaches the first model
request, the Stop hook's capture review causes a follow-up turn in which a `memory_remember`
leaves exactly one candidate, and with Stormbuffer unreachable the turn still completes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.helpers import run_sbuf
from tests.hosts.model_stub import ModelStub, Reply, Request
from tests.plugins.conftest import CAPTURE_MARKER, HOST_TIMEOUT_S, HostSandbox

TOOL = "mcp__plugin_stormbuffer_stormbuffer__memory_remember"
CANDIDATE = {
    "title": "Magnetar hotfix window",
    "kind": "decision",
    "body": "Magnetar hotfixes ship only before noon.",
    "source": {"kind": "conversation", "reference": "claude-capture-review", "actor": "agent"},
}
PROMPT = "What is the magnetar release rule?"


def _answered_a_tool(request: Request) -> bool:
    """Whether the request's last message carries a tool result."""
    content = request.body["messages"][-1]["content"]
    return isinstance(content, list) and any(block.get("type") == "tool_result" for block in content)


def _model(request: Request) -> Reply:
    """Answer the prompt; in the capture review propose one candidate, then finish."""
    if CAPTURE_MARKER not in request.text:
        return Reply.text_reply("Releases freeze on Fridays.")
    if _answered_a_tool(request):
        return Reply.text_reply("Proposed one candidate for review.")
    return Reply.call(TOOL, CANDIDATE)


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


def _model_requests(stub: ModelStub) -> list[Request]:
    """The main conversation's requests (not side requests such as a title): those with tools."""
    return [request for request in stub.responses() if isinstance(request.body, dict) and request.body.get("tools")]


def test_claude_recalls_before_the_prompt_and_captures_one_candidate(host_sandbox: HostSandbox) -> None:
    box = host_sandbox
    before = box.candidates()
    with ModelStub(_model, api="anthropic") as stub:
        env = _env(box, box.base / "claude-home", stub.base_url)
        installed = run_sbuf("plugin", "install", "claude", cwd=box.work, env=env)
        assert installed.returncode == 0, installed.stderr
        ran = _claude(box, env)
    requests = _model_requests(stub)
    log = ran.stdout[-3000:] + ran.stderr[-3000:]
    assert ran.returncode == 0, log
    assert len(requests) >= 3, log
    first = requests[0].text
    assert "untrusted evidence from Stormbuffer" in first
    assert box.record_id in first
    assert '\\"receipt_id\\":\\"' in first
    assert CAPTURE_MARKER not in first
    assert CAPTURE_MARKER in requests[1].text
    assert "Submit nothing for routine completion" in requests[1].text
    assert "requires_approval" in requests[-1].text, "the memory_remember answer reaches the model"
    new = [record for record in box.candidates() if record not in before]
    assert len(new) == 1
    shown = box.sbuf("show", new[0])
    assert "Magnetar hotfix window" in shown.stdout


def test_claude_completes_its_turn_when_stormbuffer_is_unreachable(host_sandbox: HostSandbox) -> None:
    box = host_sandbox
    with ModelStub(_model, api="anthropic") as stub:
        env = _env(box, box.base / "claude-home", stub.base_url)
        installed = run_sbuf("plugin", "install", "claude", cwd=box.work, env=env)
        assert installed.returncode == 0, installed.stderr
        ran = _claude(box, {**env, "STORMBUFFER_BIN": str(box.base / "no-such-sbuf")})
    requests = _model_requests(stub)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert json.loads(ran.stdout)["result"]
    assert requests and box.record_id not in requests[0].text and "receipt_id" not in requests[0].text

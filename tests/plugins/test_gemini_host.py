"""The real Gemini CLI (pinned, from npm) with the extension installed by `sbuf plugin install
gemini`, against a loopback stub of the Gemini API: recall reaches the first model request, the
`AfterAgent` hook's capture review causes a follow-up turn in which a `memory_remember` leaves
exactly one candidate, and with Stormbuffer unreachable the turn still completes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.helpers import run_sbuf
from tests.hosts.model_stub import ModelStub, Reply, Request
from tests.plugins.conftest import CAPTURE_MARKER, HOST_TIMEOUT_S, HostSandbox

TOOL = "mcp_stormbuffer_memory_remember"
CANDIDATE = {
    "title": "Magnetar rollback owner",
    "kind": "decision",
    "body": "Magnetar rollbacks are owned by the release captain.",
    "source": {"kind": "conversation", "reference": "gemini-capture-review", "actor": "agent"},
}
PROMPT = "What is the magnetar release rule?"


def _answered_a_tool(request: Request) -> bool:
    """Whether the request's last content carries a function response."""
    parts = request.body["contents"][-1].get("parts", [])
    return any("functionResponse" in part for part in parts)


def _model(request: Request) -> Reply:
    """Answer the prompt; in the capture review propose one candidate, then finish."""
    if CAPTURE_MARKER not in request.text:
        return Reply.text_reply("Releases freeze on Fridays.")
    if _answered_a_tool(request):
        return Reply.text_reply("Proposed one candidate for review.")
    return Reply.call(TOOL, CANDIDATE)


def _gemini(box: HostSandbox, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One prompt; a named model skips the routing classifier's side requests."""
    return subprocess.run(
        ["gemini", "-p", PROMPT, "-m", "stub-model", "--approval-mode", "yolo", "--output-format", "json"],
        cwd=box.work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=HOST_TIMEOUT_S, check=False,
    )  # fmt: skip


def _env(box: HostSandbox, base_url: str) -> dict[str, str]:
    """The stub as the Gemini API (API-key auth), the working directory trusted."""
    settings = Path(box.env["HOME"], ".gemini", "settings.json")
    settings.parent.mkdir(parents=True, exist_ok=True)
    auth = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "privacy": {"usageStatisticsEnabled": False}}
    settings.write_text(json.dumps(auth))
    return {**box.env, "GEMINI_API_KEY": "stub", "GOOGLE_GEMINI_BASE_URL": base_url,
            "GEMINI_CLI_TRUST_WORKSPACE": "true"}  # fmt: skip


def _model_requests(stub: ModelStub) -> list[Request]:
    """The main conversation's requests (not side requests): those with tools."""
    return [request for request in stub.responses() if isinstance(request.body, dict) and request.body.get("tools")]


def test_gemini_recalls_before_the_prompt_and_captures_one_candidate(host_sandbox: HostSandbox) -> None:
    box = host_sandbox
    before = box.candidates()
    with ModelStub(_model, api="gemini") as stub:
        env = _env(box, stub.base_url)
        installed = run_sbuf("plugin", "install", "gemini", cwd=box.work, env=env)
        assert installed.returncode == 0, installed.stderr
        ran = _gemini(box, env)
    requests = _model_requests(stub)
    log = ran.stdout[-3000:] + ran.stderr[-3000:]
    assert ran.returncode == 0, log
    assert len(requests) >= 3, log + "\n".join(r.path for r in stub.requests)
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
    assert "Magnetar rollback owner" in shown.stdout


def test_gemini_completes_its_turn_when_stormbuffer_is_unreachable(host_sandbox: HostSandbox) -> None:
    box = host_sandbox
    with ModelStub(_model, api="gemini") as stub:
        env = _env(box, stub.base_url)
        installed = run_sbuf("plugin", "install", "gemini", cwd=box.work, env=env)
        assert installed.returncode == 0, installed.stderr
        ran = _gemini(box, {**env, "STORMBUFFER_BIN": str(box.base / "no-such-sbuf")})
    requests = _model_requests(stub)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert requests and box.record_id not in requests[0].text and "receipt_id" not in requests[0].text

"""The real Gemini CLI (pinned, from npm) with the extension installed by `sbuf plugin install
gemini`, against a loopback stub of the Gemini API: recall reaches the first model request, the
`AfterAgent` hook's capture review causes a follow-up turn in which a `memory_remember` leaves
exactly one candidate, and with Stormbuffer unreachable the turn still completes."""

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

TOOL = "mcp_stormbuffer_memory_remember"
TITLE = "Magnetar rollback owner"
PROMPT = "What is the magnetar release rule?"
MODEL = review_model(TOOL, TITLE, "gemini-capture-review")


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


def test_gemini_recalls_before_the_prompt_and_captures_one_candidate(host_sandbox: HostSandbox) -> None:
    box = host_sandbox
    before = box.candidates()
    with ModelStub(MODEL, api="gemini") as stub:
        env = _env(box, stub.base_url)
        installed = run_sbuf("plugin", "install", "gemini", cwd=box.work, env=env)
        assert installed.returncode == 0, installed.stderr
        ran = _gemini(box, env)
    requests = tool_requests(stub.responses())
    log = ran.stdout[-3000:] + ran.stderr[-3000:]
    assert ran.returncode == 0, log
    assert len(requests) >= 3, log + "\n".join(r.path for r in stub.requests)
    assert_recalled(box, requests[0])
    assert_reviewed_once(box, requests, before, TITLE)


def test_gemini_completes_its_turn_when_stormbuffer_is_unreachable(host_sandbox: HostSandbox) -> None:
    box = host_sandbox
    with ModelStub(MODEL, api="gemini") as stub:
        env = _env(box, stub.base_url)
        installed = run_sbuf("plugin", "install", "gemini", cwd=box.work, env=env)
        assert installed.returncode == 0, installed.stderr
        ran = _gemini(box, {**env, "STORMBUFFER_BIN": str(box.base / "no-such-sbuf")})
    requests = tool_requests(stub.responses())
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert requests
    assert_not_recalled(box, requests[0])

"""The real Codex CLI (pinned, from npm) with the plugin installed by `sbuf plugin install codex`,
against the loopback model stub: recall reaches the first request, the Stop hook's capture review
causes a follow-up turn, and a `memory_remember` there leaves exactly one candidate."""

from __future__ import annotations

import json
import subprocess

from tests.helpers import run_sbuf
from tests.hosts.model_stub import ModelStub, Reply, Request, codex_config
from tests.plugins.conftest import CAPTURE_MARKER, HOST_TIMEOUT_S, HostSandbox, assert_recalled, assert_reviewed_once

CANDIDATE = {
    "title": "Magnetar deploy window",
    "kind": "decision",
    "body": "Magnetar deploys run only before noon.",
    "source": {"kind": "conversation", "reference": "codex-capture-review", "actor": "agent"},
}


def _model(request: Request) -> Reply:
    """Answer the prompt; in the capture review, propose one candidate once the Stormbuffer MCP
    tools are listed (Codex starts plugin MCP servers beside the first turn: until then, look at
    the MCP resources, which costs a round trip), then finish."""
    if CAPTURE_MARKER not in request.text:
        return Reply.text_reply("Releases freeze on Fridays.")
    if "requires_approval" in request.text:
        return Reply.text_reply("Proposed one candidate for review.")
    if '"mcp__stormbuffer"' in json.dumps(request.body.get("tools")):
        return Reply.call("memory_remember", CANDIDATE, namespace="mcp__stormbuffer")
    return Reply.call("list_mcp_resources", {})


def test_codex_recalls_before_the_prompt_and_captures_one_candidate(host_sandbox: HostSandbox) -> None:
    box = host_sandbox
    home = box.base / "codex-home"
    home.mkdir()
    env = {**box.env, "CODEX_HOME": str(home), "STUB_API_KEY": "stub"}
    before = box.candidates()
    with ModelStub(_model) as stub:
        (home / "config.toml").write_text(codex_config(stub.base_url))
        installed = run_sbuf("plugin", "install", "codex", cwd=box.work, env=env)
        assert installed.returncode == 0, installed.stderr
        ran = subprocess.run(
            ["codex", "exec", "--skip-git-repo-check", "--ephemeral", "--dangerously-bypass-hook-trust",
             "What is the magnetar release rule?"],
            cwd=box.work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=HOST_TIMEOUT_S, check=False,
        )  # fmt: skip
    requests = stub.responses()
    log = ran.stdout[-3000:] + ran.stderr[-3000:]
    assert ran.returncode == 0, log
    assert len(requests) >= 3, log
    assert_recalled(box, requests[0])
    assert_reviewed_once(box, requests, before, "Magnetar deploy window")
    markers = list((box.base / "tmp").glob("stormbuffer-codex-*/*.candidate"))
    assert len(markers) == 1, "PostToolUse recognized the candidate write (the active stop leaves it unconsumed)"

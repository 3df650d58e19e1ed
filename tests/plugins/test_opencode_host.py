"""The real OpenCode CLI (pinned, from npm) with the plugin installed by `sbuf plugin install
opencode`, its bundled Anthropic provider pointed at a loopback stub of the Messages API: recall
reaches the first model request, the plugin registers the Stormbuffer MCP server (its tools are
offered to the model), and with Stormbuffer unreachable the turn still completes.

The review sent when a session goes idle is not driven here: `opencode run` disposes its instance
as soon as the agent loop exits, before an idle-time follow-up can start, and `opencode serve`
1.18.33 with the plugin loaded does not answer `POST /session` (the node suite covers the review).
"""

from __future__ import annotations

import json
import subprocess

from tests.helpers import run_sbuf
from tests.hosts.model_stub import ModelStub, Reply, Request
from tests.plugins.conftest import HOST_TIMEOUT_S, HostSandbox, assert_not_recalled, assert_recalled, tool_requests

TOOLS = ["stormbuffer_memory_recall", "stormbuffer_memory_remember", "stormbuffer_memory_update"]
PROMPT = "What is the magnetar release rule?"


def _model(request: Request) -> Reply:
    return Reply.text_reply("Releases freeze on Fridays.")


def _opencode(box: HostSandbox, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One prompt."""
    return subprocess.run(
        ["opencode", "run", PROMPT, "-m", "anthropic/claude-sonnet-4-5"],
        cwd=box.work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=HOST_TIMEOUT_S, check=False,
    )  # fmt: skip


def _env(box: HostSandbox, base_url: str) -> dict[str, str]:
    """OpenCode's configuration in the sandbox: the bundled Anthropic provider at the stub."""
    config = box.base / "config"
    (config / "opencode").mkdir(parents=True, exist_ok=True)
    settings = {"provider": {"anthropic": {"options": {"baseURL": f"{base_url}/v1", "apiKey": "stub"}}},
                "autoupdate": False, "share": "disabled"}  # fmt: skip
    (config / "opencode" / "opencode.json").write_text(json.dumps(settings))
    # A configuration directory holding a plugin gets OpenCode's plugin SDK installed into it unless its
    # `node_modules` exists and its lock file names the SDK; offline, that install stalls every start
    # for over a minute. The plugin does not use the SDK: the lock file only says it is there.
    (config / "opencode" / "node_modules").mkdir(exist_ok=True)
    lock = {"packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}
    (config / "opencode" / "package-lock.json").write_text(json.dumps(lock))
    return {**box.env, "XDG_CONFIG_HOME": str(config), "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1"}  # fmt: skip


def test_opencode_recalls_before_the_prompt_and_offers_the_memory_tools(host_sandbox: HostSandbox) -> None:
    box = host_sandbox
    with ModelStub(_model, api="anthropic") as stub:
        env = _env(box, stub.base_url)
        installed = run_sbuf("plugin", "install", "opencode", cwd=box.work, env=env)
        assert installed.returncode == 0, installed.stderr
        ran = _opencode(box, env)
    requests = tool_requests(stub.responses())
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "Releases freeze on Fridays." in ran.stdout
    assert_recalled(box, requests[0])
    offered = {tool["name"] for tool in requests[0].body["tools"]}
    assert set(TOOLS) <= offered


def test_opencode_completes_its_turn_when_stormbuffer_is_unreachable(host_sandbox: HostSandbox) -> None:
    box = host_sandbox
    with ModelStub(_model, api="anthropic") as stub:
        env = _env(box, stub.base_url)
        installed = run_sbuf("plugin", "install", "opencode", cwd=box.work, env=env)
        assert installed.returncode == 0, installed.stderr
        # no project store here: recall fails and the MCP server exits at once
        ran = _opencode(box, {**env, "STORMBUFFER_SCOPE": "project"})
    requests = tool_requests(stub.responses())
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "Releases freeze on Fridays." in ran.stdout
    assert requests
    assert_not_recalled(box, requests[0])

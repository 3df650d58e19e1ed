"""The real OpenCode CLI (pinned, from npm) with the plugin installed by `sbuf plugin install
opencode`, its bundled Anthropic provider pointed at a loopback stub of the Messages API: recall
reaches the first model request, the plugin registers the Stormbuffer MCP server (its tools are
offered to the model), and with Stormbuffer unreachable the turn still completes.

The review sent when a session goes idle is driven through `opencode serve` and its HTTP API, whose
process outlives the turn: `opencode run` disposes its instance as soon as its turn ends, before an
idle-time follow-up can start.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tests.helpers import run_sbuf
from tests.hosts.model_stub import ModelStub, Reply, Request
from tests.plugins.conftest import (
    HOST_TIMEOUT_S,
    HostSandbox,
    answered_a_tool,
    assert_not_recalled,
    assert_recalled,
    assert_reviewed_once,
    review_model,
    tool_requests,
)

TOOLS = ["stormbuffer_memory_recall", "stormbuffer_memory_remember", "stormbuffer_memory_update"]
PROMPT = "What is the magnetar release rule?"
MODEL_ID = {"providerID": "anthropic", "modelID": "claude-sonnet-4-5"}
TITLE = "Magnetar rollback owner"
LISTENING = "opencode server listening on "


def _model(request: Request) -> Reply:
    return Reply.text_reply("Releases freeze on Fridays.")


def _opencode(box: HostSandbox, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One prompt."""
    return subprocess.run(
        ["opencode", "run", PROMPT, "-m", f"{MODEL_ID['providerID']}/{MODEL_ID['modelID']}"],
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


def _api(url: str, path: str, body: dict[str, Any] | None = None, timeout: float = HOST_TIMEOUT_S) -> Any:
    """One call to the server's HTTP API (a POST when there is a body); its JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read() or b"null")


@contextmanager
def _serve(box: HostSandbox, env: dict[str, str]) -> Iterator[str]:
    """`opencode serve` on a free loopback port; its URL once it answers.

    A request that reaches OpenCode 1.18.33 in its first seconds of listening, while the instance
    is still starting, is never answered (with or without plugins); later ones are. So readiness is
    polled with short requests before the test's own."""
    log = box.base / "opencode-serve.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            ["opencode", "serve", "--port", "0", "--hostname", "127.0.0.1"],
            cwd=box.work, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + HOST_TIMEOUT_S
        url = ""
        while time.monotonic() < deadline and server.poll() is None:
            lines = [line for line in log.read_text().splitlines() if line.startswith(LISTENING)]
            url = url or (lines[0].removeprefix(LISTENING).strip() if lines else "")
            try:
                if url and _api(url, "/config", timeout=2):
                    break
            except OSError:
                pass
            time.sleep(0.3)
        else:
            raise AssertionError("opencode serve did not answer:\n" + log.read_text()[-3000:])
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _wait_for(condition: Callable[[], bool], timeout: float = HOST_TIMEOUT_S) -> None:
    """Poll `condition()` until it holds or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.2)


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


def test_opencode_reviews_an_idle_session_once_and_captures_one_candidate(host_sandbox: HostSandbox) -> None:
    box = host_sandbox
    before = box.candidates()
    model = review_model("stormbuffer_memory_remember", TITLE, "opencode-capture-review")
    with ModelStub(model, api="anthropic") as stub:
        env = _env(box, stub.base_url)
        installed = run_sbuf("plugin", "install", "opencode", cwd=box.work, env=env)
        assert installed.returncode == 0, installed.stderr
        with _serve(box, env) as url:
            session = _api(url, "/session", {})
            turn = _api(url, f"/session/{session['id']}/message", {"parts": [{"type": "text", "text": PROMPT}],
                                                                   "model": MODEL_ID})  # fmt: skip
            assert "Releases freeze on Fridays." in json.dumps(turn)
            # the review runs once the session is idle: wait for the model's answer to its tool result,
            # then for the session to be idle again; a second review would start within the lingering seconds
            _wait_for(lambda: any(answered_a_tool(request) for request in tool_requests(stub.responses())))
            _wait_for(lambda: session["id"] not in _api(url, "/session/status", timeout=10))
            time.sleep(3)
    requests = tool_requests(stub.responses())
    assert_recalled(box, requests[0])
    assert len(requests) == 3, [request.text[-300:] for request in requests]
    assert_reviewed_once(box, requests, before, TITLE)

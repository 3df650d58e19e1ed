"""Fixtures for the plugin tests: a sandbox with one seeded, warmed global store per module, and
the pinned host CLIs on PATH."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import tools
from tests.helpers import SBUF, run_sbuf, sbuf_env
from tests.hosts.model_stub import ModelStub, Reply, Request

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
CAPTURE_MARKER = "[stormbuffer:capture-review]"
HOST_TIMEOUT_S = 120
SEED = {
    "title": "Magnetar release freeze",
    "kind": "decision",
    "body": "The magnetar release freezes on Fridays; nothing ships after noon.",
    "source": {"kind": "conversation", "reference": "plugin-test-seed", "actor": "agent"},
}


@dataclass
class HostSandbox:
    base: Path
    work: Path
    env: dict[str, str]
    record_id: str

    def sbuf(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return run_sbuf(*args, cwd=self.work, env=self.env, input=input)

    def candidates(self) -> list[str]:
        """The ids of the store's candidates."""
        listed = self.sbuf("list", "--all")
        assert listed.returncode == 0, listed.stderr
        return [line.split("\t")[0] for line in listed.stdout.splitlines() if "\tcandidate\t" in line]


def _wrapper(directory: Path, name: str) -> None:
    """`<directory>/<name>`: runs the pinned tool, as the host's own command would."""
    script = directory / name
    command = " ".join(f"'{part}'" for part in tools.tool_command(name))
    script.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.fixture(scope="module")
def host_sandbox(tmp_path_factory: pytest.TempPathFactory) -> HostSandbox:
    """A global store holding one approved agent memory, recalled once (so the index is built), with
    `sbuf`, the pinned Node.js and wrappers for the pinned host CLIs first on PATH."""
    base = tmp_path_factory.mktemp("host")
    bin_dir = base / "bin"
    bin_dir.mkdir()
    for name in ("claude", "codex", "gemini", "opencode", "pi"):
        _wrapper(bin_dir, name)
    work = base / "work"
    work.mkdir()
    path = os.pathsep.join([str(bin_dir), str(tools.node().parent), str(SBUF.parent), os.environ["PATH"]])
    # anything a host tries beyond the loopback stub (update checks, plugin catalogues) meets a closed port
    blocked = {
        name: "http://127.0.0.1:9"
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
    }
    env = sbuf_env(
        base, PATH=path, PWD=str(work), NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", **blocked
    )
    box = HostSandbox(base, work, env, "")
    assert box.sbuf("init").returncode == 0
    remembered = box.sbuf("invoke", "remember", input=json.dumps({"version": 1, **SEED}))
    box.record_id = json.loads(remembered.stdout)["result"]["record_id"]
    assert box.sbuf("approve", box.record_id).returncode == 0
    warm = box.sbuf("invoke", "context", input=json.dumps({"version": 1, "query": "magnetar release"}))
    assert box.record_id in warm.stdout
    return box


def pi_rpc_turn(box: HostSandbox, env: dict[str, str], stub: ModelStub, prompt: str, *, requests: int,
                linger_s: float = 0.0) -> tuple[str, str]:  # fmt: skip
    """Send `prompt` to `pi` in RPC mode against `stub` and wait until the stub has answered `requests`
    requests (or pi ended, or HOST_TIMEOUT_S passed), then `linger_s` more; pi's stdout and stderr."""
    pi = subprocess.Popen(
        ["pi", "--provider", "stub", "--model", "stub-model", "--no-session", "--mode", "rpc"],
        cwd=box.work, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert pi.stdin is not None
        pi.stdin.write(json.dumps({"type": "prompt", "message": prompt}) + "\n")
        pi.stdin.flush()
        deadline = time.monotonic() + HOST_TIMEOUT_S
        while len(stub.responses()) < requests and time.monotonic() < deadline and pi.poll() is None:
            time.sleep(0.1)
        time.sleep(linger_s)
        return pi.communicate(timeout=30)
    finally:
        if pi.poll() is None:
            pi.kill()
            pi.communicate()


def tool_requests(requests: list[Request]) -> list[Request]:
    """The main conversation's model requests: those offering tools (not titles, routing and such)."""
    return [request for request in requests if isinstance(request.body, dict) and request.body.get("tools")]


def assert_recalled(box: HostSandbox, request: Request) -> None:
    """The request carries the evidence block with its receipt and the seeded memory, and no review."""
    assert "untrusted evidence from Stormbuffer" in request.text
    assert box.record_id in request.text
    assert '\\"receipt_id\\":\\"' in request.text
    assert CAPTURE_MARKER not in request.text


def assert_not_recalled(box: HostSandbox, request: Request) -> None:
    assert box.record_id not in request.text and "receipt_id" not in request.text


def assert_reviewed_once(box: HostSandbox, requests: list[Request], before: list[str], title: str) -> None:
    """The second request is the capture review, the last one answers its `memory_remember`, and the
    store gained exactly one candidate: `title`."""
    assert CAPTURE_MARKER in requests[1].text
    assert "Submit nothing for routine completion" in requests[1].text
    assert "requires_approval" in requests[-1].text, "the memory_remember answer reaches the model"
    new = [record for record in box.candidates() if record not in before]
    assert len(new) == 1
    assert title in box.sbuf("show", new[0]).stdout


def answered_a_tool(request: Request) -> bool:
    """Whether the request's last message carries a tool result (Anthropic `tool_result` blocks,
    Gemini `functionResponse` parts)."""
    body = request.body
    if "messages" in body:
        content = body["messages"][-1]["content"]
        return isinstance(content, list) and any(block.get("type") == "tool_result" for block in content)
    return any("functionResponse" in part for part in body["contents"][-1].get("parts", []))


def review_model(tool: str, title: str, reference: str) -> Callable[[Request], Reply]:
    """A scripted model: it answers the prompt, and in the capture review proposes the candidate
    `title` with `tool`, then finishes once the tool has answered."""
    candidate = {"title": title, "kind": "decision", "body": f"{title}: the release captain decides.",
                 "source": {"kind": "conversation", "reference": reference, "actor": "agent"}}  # fmt: skip

    def model(request: Request) -> Reply:
        if CAPTURE_MARKER not in request.text:
            return Reply.text_reply("Releases freeze on Fridays.")
        if answered_a_tool(request):
            return Reply.text_reply("Proposed one candidate for review.")
        return Reply.call(tool, candidate)

    return model

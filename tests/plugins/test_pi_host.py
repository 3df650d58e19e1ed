"""The real Pi coding agent (pinned, from npm) with the extension installed by `sbuf plugin install pi`
and a custom provider at the loopback model stub: the hidden context message arrives before the
first model request, and the settled agent sends exactly one capture review."""

from __future__ import annotations

import json

from tests.helpers import run_sbuf
from tests.hosts.model_stub import ModelStub, Reply, pi_models
from tests.plugins.conftest import CAPTURE_MARKER, HostSandbox, pi_rpc_turn

PROMPT = "What is the magnetar release rule?"


def _rpc_events(stdout: str) -> list[dict[str, object]]:
    events = []
    for line in stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def test_pi_recalls_before_the_first_request_and_reviews_once(host_sandbox: HostSandbox) -> None:
    box = host_sandbox
    agent_dir = box.base / "pi-agent"
    agent_dir.mkdir()
    env = {**box.env, "PI_CODING_AGENT_DIR": str(agent_dir), "PI_OFFLINE": "1"}
    installed = run_sbuf("plugin", "install", "pi", cwd=box.work, env=env)
    assert installed.returncode == 0, installed.stderr
    turns = [Reply.text_reply("Releases freeze on Fridays."), Reply.text_reply("Nothing durable to propose.")]
    with ModelStub(turns) as stub:
        (agent_dir / "models.json").write_text(pi_models(stub.base_url))
        # a second review would be sent within the lingering second
        stdout, stderr = pi_rpc_turn(box, env, stub, PROMPT, requests=2, linger_s=1.0)
    requests = stub.responses()
    log = stdout[-3000:] + stderr[-3000:]
    assert len(requests) == 2, log
    first, second = requests[0].text, requests[1].text
    assert PROMPT in first
    assert "untrusted evidence from Stormbuffer" in first
    assert box.record_id in first
    assert '\\"receipt_id\\":\\"' in first
    assert CAPTURE_MARKER not in first
    assert CAPTURE_MARKER in second
    assert "Submit nothing for routine completion" in second
    messages = [event.get("message") for event in _rpc_events(stdout) if event.get("type") == "message_end"]
    custom = {m["customType"]: m for m in messages if isinstance(m, dict) and "customType" in m}
    assert custom["stormbuffer-context"]["display"] is False
    assert custom["stormbuffer-capture-review"]["display"] is False

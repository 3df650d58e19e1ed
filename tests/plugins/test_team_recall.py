"""Recall from a team server: with `STORMBUFFER_URL` and `STORMBUFFER_TOKEN` set, every host's
plugin asks a real `sbuf serve --team` on loopback (`POST /v1/invoke/context` with the token) and
renders its evidence with the receipt; the server's audit names the token's holder. A refused token
or a server that is down leaves the prompt as it was, and the token appears in no output."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import tools
from tests.helpers import sbuf_env
from tests.http.conftest import sandbox_with_stores, start
from tests.plugins.conftest import CAPTURE_MARKER, PLUGINS
from tests.team.test_server import Team

SEEDED = "01900000-0000-7000-8000-00000000c0de"
PROMPT = "when does the pulsar rollout freeze"
TIMEOUT_S = 120  # a guard against a hung process, never a speed assertion
# host -> its prompt hook and the event name it sends
COMMAND_HOOKS = {
    "codex": (PLUGINS / "codex-plugin-stormbuffer" / "hooks" / "codex.cjs", "UserPromptSubmit"),
    "claude": (PLUGINS / "claude-plugin-stormbuffer" / "hooks" / "claude.cjs", "UserPromptSubmit"),
    "gemini": (PLUGINS / "gemini-extension-stormbuffer" / "hooks" / "gemini.cjs", "BeforeAgent"),
}
# The OpenCode and Pi plugins' own handlers, driven as their hosts call them; each prints the context.
OPENCODE = json.dumps(str(PLUGINS / "opencode-plugin-stormbuffer" / "stormbuffer.js"))
PI = json.dumps(str(PLUGINS / "pi-plugin-stormbuffer" / "src" / "index.js"))
MODULE_DRIVERS = {
    "opencode": f"""
const {{ createLifecycle }} = await import({OPENCODE});
const lifecycle = createLifecycle({{ client: {{}}, directory: process.cwd() }});
await lifecycle.chatMessage({{ sessionID: 's' }}, {{ parts: [{{ type: 'text', text: process.argv[1] }}] }});
const output = {{ system: [] }};
await lifecycle.systemTransform({{ sessionID: 's' }}, output);
const settings = {{}};
await lifecycle.config(settings);
console.log(JSON.stringify({{ context: output.system.join(''), mcp: settings.mcp.stormbuffer.command }}));
""",
    "pi": f"""
const {{ createLifecycle }} = await import({PI});
const answer = await createLifecycle({{}}).beforeAgentStart({{ prompt: process.argv[1] }}, {{ cwd: process.cwd() }});
console.log(JSON.stringify({{ context: answer?.message?.content ?? '' }}));
""",
}
HOSTS = [*COMMAND_HOOKS, *MODULE_DRIVERS]


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    server = start(sandbox_with_stores(tmp_path_factory.mktemp("team-recall") / "sandbox", None), "--team")
    crew = Team(server)
    crew.make("plugin-bot", "agent")
    server.write(SEEDED, title="Pulsar rollout freeze", body="The pulsar rollout freezes on Thursdays at noon.\n")
    yield crew
    assert crew.server.stop() == 0


def run_host(host: str, base: Path, url: str, token: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    """The context `host`'s plugin adds for PROMPT, and its process, in an environment whose only way
    to Stormbuffer is the team server (no `sbuf` to run)."""
    work = base / "work"
    work.mkdir(parents=True, exist_ok=True)
    env = sbuf_env(base, STORMBUFFER_URL=url, STORMBUFFER_TOKEN=token, STORMBUFFER_BIN=str(base / "no-sbuf"))
    if host in COMMAND_HOOKS:
        hook, event_name = COMMAND_HOOKS[host]
        event = {"hook_event_name": event_name, "prompt": PROMPT, "cwd": str(work), "session_id": "s", "turn_id": "t"}
        argv, stdin = [str(tools.node()), str(hook), "prompt"], json.dumps(event)
    else:
        argv, stdin = [str(tools.node()), "--input-type=module", "-e", MODULE_DRIVERS[host], PROMPT], ""
    done = subprocess.run(argv, cwd=work, env=env, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    output = json.loads(done.stdout)
    if host in COMMAND_HOOKS:
        return str(output.get("hookSpecificOutput", {}).get("additionalContext", "")), done
    return str(output["context"]), done


def audit(team: Team) -> list[dict[str, object]]:
    read = team.server.box.sbuf("--project", "team", "audit", "--json")
    assert read.returncode == 0, read.stderr
    return [json.loads(line) for line in read.stdout.splitlines()]


@pytest.mark.parametrize("host", HOSTS)
def test_the_evidence_comes_from_the_team_server_under_the_tokens_name(team: Team, host: str, tmp_path: Path) -> None:
    context, _ = run_host(host, tmp_path, team.server.base_url, team.tokens["plugin-bot"])
    assert context.startswith("The following is untrusted evidence from Stormbuffer memory")
    result = json.loads(context.split("\n\n", 1)[1])
    receipt = result["receipt"]["receipt_id"]
    assert SEEDED in [block["record_id"] for block in result["blocks"]]
    entry = audit(team)[-1]
    assert (entry["who"], entry["operation"], entry["status"]) == ("plugin-bot", "recall", 200)
    assert entry["receipt"] == receipt
    assert SEEDED in entry["records"]  # type: ignore[operator]


@pytest.mark.parametrize("host", HOSTS)
def test_a_refused_token_leaves_the_prompt_alone_and_shows_no_token(team: Team, host: str, tmp_path: Path) -> None:
    refused = "sbt_0000000000000_" + "r" * 43
    context, done = run_host(host, tmp_path, team.server.base_url, refused)
    assert context == ""
    assert refused not in done.stdout + done.stderr and refused[18:] not in done.stdout + done.stderr
    entry = audit(team)[-1]
    assert (entry["who"], entry["status"], entry["request"]) == (None, 401, "POST /v1/invoke/context")


@pytest.mark.parametrize("host", HOSTS)
def test_a_server_that_is_down_leaves_the_prompt_alone(team: Team, host: str, tmp_path: Path) -> None:
    with socket.socket() as closed:  # a loopback port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    token = team.tokens["plugin-bot"]
    context, done = run_host(host, tmp_path, f"http://127.0.0.1:{port}", token)
    assert context == ""
    assert token not in done.stdout + done.stderr


def test_plain_http_off_loopback_is_never_asked(team: Team, tmp_path: Path) -> None:
    """A token crosses a network only over TLS: an `http` address off loopback recalls nothing (no
    request is made, so nothing can hang either)."""
    before = len(audit(team))
    context, done = run_host("codex", tmp_path, "http://192.0.2.1:7342", team.tokens["plugin-bot"])
    assert context == "" and len(audit(team)) == before
    assert team.tokens["plugin-bot"] not in done.stdout + done.stderr


def test_the_mcp_server_and_the_review_go_through_the_team_server(team: Team, tmp_path: Path) -> None:
    """OpenCode registers `stormbuffer-mcp --remote <URL>/mcp`; the review names the team server."""
    _, done = run_host("opencode", tmp_path, team.server.base_url + "/", team.tokens["plugin-bot"])
    assert json.loads(done.stdout)["mcp"] == ["stormbuffer-mcp", "--remote", f"{team.server.base_url}/mcp"]
    hook, _ = COMMAND_HOOKS["codex"]
    env = sbuf_env(tmp_path, STORMBUFFER_URL=team.server.base_url, STORMBUFFER_TOKEN=team.tokens["plugin-bot"])
    event = {"hook_event_name": "Stop", "cwd": str(tmp_path), "session_id": "s", "turn_id": "stop"}
    stopped = subprocess.run([str(tools.node()), str(hook), "stop"], env=env, input=json.dumps(event),
                             capture_output=True, text=True, timeout=TIMEOUT_S, check=True)  # fmt: skip
    reason = json.loads(stopped.stdout)["reason"]
    assert reason.startswith(CAPTURE_MARKER) and "team server at $STORMBUFFER_URL" in reason
    assert team.tokens["plugin-bot"] not in reason

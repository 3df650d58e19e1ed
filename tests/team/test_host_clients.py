"""Real host CLIs against a real `sbuf serve --team`, their model a loopback stub that answers with
tool calls: Codex connects natively over Streamable HTTP (`url` + `bearer_token_env_var`), Pi
through `stormbuffer-mcp --remote`. Each recalls a seeded memory, then proposes one; the
candidate's source actor is the token's name, not what the model claimed."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import tools
from tests.helpers import SBUF
from tests.hosts.model_stub import ModelStub, Reply, Request, codex_config, pi_models

from .serving import serving_team
from .test_server import Team

HOST_TIMEOUT_S = 120
SEEDED = "01900000-0000-7000-8000-0000000c0de5"
SEED_TEXT = "Releases ship on Tuesdays after the magnetar check.\n"
QUERY = {"query": "magnetar release", "budget": 256}
CLAIMED = "human"  # what the model claims as the source's actor; the server writes the token's name


def candidate(title: str) -> dict[str, Any]:
    return {"title": title, "kind": "decision", "body": f"{title}: the release captain decides.",
            "source": {"kind": "conversation", "reference": "team-host-test", "actor": CLAIMED}}  # fmt: skip


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, acquired_models: Path) -> Iterator[Team]:
    """A team server on the project store holding one agent memory, and agent tokens for the hosts."""
    roles = {"codex-bot": "agent", "pi-bot": "agent"}
    stored = {SEEDED: ("Magnetar release constraint", SEED_TEXT)}
    with serving_team(tmp_path_factory.mktemp("team-hosts") / "sandbox", acquired_models, roles, stored) as team:
        yield team


def host_env(team: Team, name: str, **extra: str) -> dict[str, str]:
    """The sandbox's environment with the token in `STORMBUFFER_TOKEN`, the pinned Node.js and `sbuf`
    first on PATH, and every proxy a closed loopback port (nothing leaves the machine)."""
    blocked = {name: "http://127.0.0.1:9" for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
                                                       "https_proxy", "all_proxy")}  # fmt: skip
    path = os.pathsep.join([str(tools.node().parent), str(SBUF.parent), os.environ["PATH"]])
    return {**team.server.box.env, **blocked, "PATH": path, "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost", "STORMBUFFER_TOKEN": team.tokens[name], **extra}  # fmt: skip


def proposed_by(team: Team, title: str) -> list[dict[str, Any]]:
    """The store's candidates titled `title`, as `sbuf --project invoke get` answers them (read
    locally, not through the server)."""
    box = team.server.box
    listed = box.sbuf("--project", "list", "--all")
    assert listed.returncode == 0, listed.stderr
    found = []
    for line in listed.stdout.splitlines():
        record_id, *fields = line.split("\t")
        if "candidate" in fields and title in line:
            got = box.sbuf("--project", "invoke", "get", input=json.dumps({"version": 1, "id": record_id}))
            found.append(json.loads(got.stdout)["result"])
    return found


def assert_recalled_then_proposed(team: Team, requests: list[Request], name: str, title: str, log: str) -> None:
    recalled = [request for request in requests if SEEDED in request.text]
    assert recalled, "the recall's answer (the seeded memory) reaches the model\n" + log
    assert SEED_TEXT.strip() in recalled[0].text
    assert any("requires_approval" in request.text for request in requests), log
    (record,) = proposed_by(team, title)
    assert record["status"] == "candidate"
    assert [source["actor"] for source in record["sources"]] == [name]  # the claimed actor dropped
    entries = team.server.box.sbuf("--project", "team", "audit", "--who", name, "--json").stdout.splitlines()
    requests_made = [json.loads(entry)["request"] for entry in entries]
    assert "tools/call memory_recall" in requests_made and "tools/call memory_remember" in requests_made
    assert team.tokens[name] not in "".join(team.server.log) + log


def test_codex_over_streamable_http_recalls_and_proposes_as_its_token(team: Team, tmp_path: Path) -> None:
    title = "Magnetar hotfix owner"
    home = tmp_path / "codex-home"
    home.mkdir()

    def model(request: Request) -> Reply:
        """Recall once the team server's tools are listed (Codex connects to MCP servers beside the
        first turn: until then, list the MCP resources, which costs a round trip), then propose,
        then finish."""
        if "requires_approval" in request.text:
            return Reply.text_reply("Proposed one candidate for review.")
        if SEEDED in request.text:
            return Reply.call("memory_remember", candidate(title), namespace="mcp__stormbuffer")
        if '"mcp__stormbuffer"' in json.dumps(request.body.get("tools")):
            return Reply.call("memory_recall", QUERY, namespace="mcp__stormbuffer")
        return Reply.call("list_mcp_resources", {})

    env = host_env(team, "codex-bot", CODEX_HOME=str(home), STUB_API_KEY="stub")
    with ModelStub(model) as stub:
        (home / "config.toml").write_text(
            codex_config(stub.base_url)
            + f'\n[mcp_servers.stormbuffer]\nurl = "{team.server.base_url}/mcp"\n'
            + 'bearer_token_env_var = "STORMBUFFER_TOKEN"\n'
        )
        ran = subprocess.run(
            [*tools.tool_command("codex"), "exec", "--skip-git-repo-check", "--ephemeral",
             "What is the magnetar release rule? Record who owns hotfixes."],
            cwd=team.server.box.cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=HOST_TIMEOUT_S, check=False,
        )  # fmt: skip
    log = ran.stdout[-3000:] + ran.stderr[-3000:]
    assert ran.returncode == 0, log
    assert_recalled_then_proposed(team, stub.responses(), "codex-bot", title, log)


def test_pi_through_the_remote_relay_recalls_and_proposes_as_its_token(team: Team, tmp_path: Path) -> None:
    """Pi has no MCP of its own: its MCP adapter extension (pinned beside Pi) starts the relay from
    its `mcp.json` and offers the server's tools through its one `mcp` proxy tool."""
    adapter = tools.install() / "pi-mcp-adapter" / "index.ts"
    title = "Magnetar rollback owner"
    agent_dir = tmp_path / "pi-agent"
    agent_dir.mkdir()
    relay = {"command": "stormbuffer-mcp", "args": ["--remote", f"{team.server.base_url}/mcp"]}
    (agent_dir / "mcp.json").write_text(json.dumps({"mcpServers": {"stormbuffer": relay}}))

    def proxied(tool: str, arguments: dict[str, Any]) -> Reply:
        """A call through the adapter's proxy tool, which names the server's tools `<server>_<tool>`."""
        proxy = {"tool": f"stormbuffer_{tool}", "args": json.dumps(arguments), "server": "stormbuffer"}
        return Reply.call("mcp", proxy)

    def model(request: Request) -> Reply:
        if "requires_approval" in request.text:
            return Reply.text_reply("Proposed one candidate for review.")
        if SEEDED in request.text:
            return proxied("memory_remember", candidate(title))
        return proxied("memory_recall", QUERY)

    env = host_env(team, "pi-bot", PI_CODING_AGENT_DIR=str(agent_dir), PI_OFFLINE="1")
    with ModelStub(model) as stub:
        (agent_dir / "models.json").write_text(pi_models(stub.base_url))
        pi = subprocess.Popen(
            [*tools.tool_command("pi"), "--provider", "stub", "--model", "stub-model", "--no-session",
             "--mode", "rpc", "--extension", str(adapter)],
            cwd=team.server.box.cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert pi.stdin is not None
            pi.stdin.write(json.dumps({"type": "prompt", "message": "Who owns magnetar rollbacks?"}) + "\n")
            pi.stdin.flush()
            deadline = time.monotonic() + HOST_TIMEOUT_S
            while time.monotonic() < deadline and pi.poll() is None:
                if any("requires_approval" in request.text for request in stub.responses()):
                    break
                time.sleep(0.1)
            time.sleep(0.5)
        finally:
            pi.kill()
            stdout, stderr = pi.communicate()
    log = stdout[-3000:] + stderr[-3000:]
    assert_recalled_then_proposed(team, stub.responses(), "pi-bot", title, log)

"""`sbuf add --access`: who can see a memory a person adds, said on the way in and honoured by agent reads."""

from __future__ import annotations

import json

from tests.helpers import Sandbox
from tests.mcp.conftest import RawServer, request

TITLE = "Deploys need a green build"
BODY = "Run the suite before tagging."
SEARCH = json.dumps({"version": 1, "query": "deploy", "limit": 5})


def found_by_agents(sandbox: Sandbox) -> list[str]:
    done = sandbox.sbuf("--project", "invoke", "search", input=SEARCH)
    assert done.returncode == 0, done.stderr
    return [hit["record_id"] for hit in json.loads(done.stdout)["result"]]


def test_the_readme_walk_through_finds_an_agent_memory_and_not_a_human_one(sandbox: Sandbox) -> None:
    assert sandbox.sbuf("--project", "init").returncode == 0
    human = sandbox.sbuf("--project", "add", "--title", TITLE, "--body", BODY)
    agent = sandbox.sbuf("--project", "add", "--access", "agent", "--title", TITLE, "--body", BODY)
    assert (human.returncode, agent.returncode) == (0, 0)
    assert "Visible to people only" in human.stderr and "--access agent" in human.stderr
    assert "Visible to people and coding agents" in agent.stderr
    assert found_by_agents(sandbox) == [agent.stdout.strip()]
    shown = sandbox.sbuf("--project", "show", agent.stdout.strip()).stdout
    assert 'access = "agent"' in shown


def test_mcp_recall_finds_only_the_agent_memory(sandbox: Sandbox) -> None:
    assert sandbox.sbuf("--project", "init").returncode == 0
    sandbox.sbuf("--project", "add", "--title", TITLE, "--body", BODY)
    agent = sandbox.sbuf("--project", "add", "--access", "agent", "--title", TITLE, "--body", BODY).stdout.strip()
    server = RawServer(sandbox, "--stdio", "--project")
    assert "result" in server.initialize()
    server.send(request(2, "tools/call", {"name": "memory_recall", "arguments": {"query": "deploy"}}))
    blocks = server.receive()["result"]["structuredContent"]["result"]["blocks"]
    assert [block["record_id"] for block in blocks] == [agent]
    assert server.close()[:2] == (0, [])


def test_add_help_says_who_can_see_the_memory(sandbox: Sandbox) -> None:
    helped = sandbox.sbuf("add", "--help").stdout
    assert "--access [human|agent]" in helped and "only people see it" in helped


def test_an_unknown_access_class_is_a_usage_error(sandbox: Sandbox) -> None:
    assert sandbox.sbuf("--project", "init").returncode == 0
    done = sandbox.sbuf("--project", "add", "--access", "robots", "--title", TITLE, "--body", BODY)
    assert done.returncode == 2 and "'robots' is not one of 'human', 'agent'" in done.stderr

"""MCP over Streamable HTTP at `/mcp` of a real `sbuf serve --team`, spoken to by the SDK's own
client: the caller's token decides what runs, its name is the actor of what it writes, refusals
come before any work, every call is audited, and the envelopes are those of the stdio server."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.http.conftest import TIMEOUT, sandbox_with_stores, start
from tests.mcp.conftest import STORMBUFFER_MCP, call, connect
from tests.mcp.test_equivalence import Masker, differences

from .test_server import Team

pytestmark = pytest.mark.anyio

STORED = "01900000-0000-7000-8000-0000000005e1"
FOREIGN_SCOPE = "project:01900000-0000-7000-8000-000000000bad"
SOURCE = {"kind": "conversation", "reference": "chat", "actor": "human"}
REMEMBER = {"title": "Deploys run on Fridays", "kind": "fact", "body": "The deploy runs on Fridays.",
            "source": SOURCE}  # fmt: skip
RECALL = {"query": "magnetar release", "budget": 256}


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, acquired_models: Path) -> Iterator[Team]:
    box = sandbox_with_stores(tmp_path_factory.mktemp("team-mcp") / "sandbox", acquired_models)
    server = start(box, "--team")
    crew = Team(server)
    for name, role in (("rita", "reader"), ("bot", "agent"), ("alice", "reviewer"), ("gone", "agent")):
        crew.make(name, role)
    crew.make("other", "admin", "--scope", FOREIGN_SCOPE)
    assert box.sbuf("--project", "team", "token", "revoke", "gone").returncode == 0
    server.write(STORED, title="Release constraint", body="Releases ship on Tuesdays after the magnetar check.\n")
    yield crew
    assert server.stop() == 0


@asynccontextmanager
async def remote(team: Team, name: str, *, modern: bool = False) -> AsyncIterator[ClientSession]:
    """An SDK client session over Streamable HTTP, sending `name`'s token: initialized (the
    handshake of the older revisions), or with `modern` adopting `server/discover` (the stateless
    2026-07-28 revision)."""
    headers = {"Authorization": f"Bearer {team.tokens[name]}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=TIMEOUT, trust_env=False) as http,
        streamable_http_client(f"{team.server.base_url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write, read_timeout_seconds=TIMEOUT) as client,
    ):
        if modern:
            await client.discover()
        else:
            await client.initialize()
        yield client


def audit(team: Team, who: str) -> list[dict[str, Any]]:
    done = team.server.box.sbuf("--project", "team", "audit", "--who", who, "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


async def test_a_reader_recalls_and_cannot_remember(team: Team) -> None:
    async with remote(team, "rita") as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert tools == {"memory_forget", "memory_get", "memory_recall", "memory_remember", "memory_update"}
        templates = (await client.list_resource_templates()).resource_templates
        assert len(templates) == 3
        recalled = await call(client, "memory_recall", RECALL)
        assert recalled["ok"] is True
        assert STORED in json.dumps(recalled["result"])
        refused = await call(client, "memory_remember", REMEMBER)
        assert refused["ok"] is False and refused["error"]["code"] == "permission_denied"
        assert "agent role" in refused["error"]["message"]
        got = await client.read_resource(f"stormbuffer://record/{STORED}")
        assert json.loads(got.contents[0].text)["id"] == STORED  # type: ignore[union-attr]
    entries = [entry for entry in audit(team, "rita") if entry["door"] == "mcp"]
    assert [(e["operation"], e["request"], e["status"]) for e in entries] == [
        ("recall", "tools/call memory_recall", 200),
        ("remember", "tools/call memory_remember", 403),
        ("resources", "resources/read", 200),
    ]
    assert STORED in entries[0]["records"] and entries[0]["receipt"]
    assert not any(line.count("sbt_") for line in (team.server.box.project_root / "team" / "audit.jsonl").open())


async def test_an_agent_remembers_a_candidate_in_its_own_name(team: Team) -> None:
    async with remote(team, "bot") as client:
        remembered = await call(client, "memory_remember", REMEMBER)
        assert remembered["ok"] is True, remembered
        record_id = remembered["result"]["record_id"]
        got = await call(client, "memory_get", {"id": record_id})
        forget = await call(client, "memory_forget", {"id": STORED, "reason": "stale"})
    assert got["result"]["status"] == "candidate"
    assert [source["actor"] for source in got["result"]["sources"]] == ["bot"]  # the claimed "human" dropped
    text = (team.server.box.project_root / "records" / f"{record_id}.md").read_text(encoding="utf-8")
    assert 'actor = "bot"' in text and 'actor = "human"' not in text
    assert forget["ok"] is False and forget["error"]["code"] == "permission_denied"
    written = [entry for entry in audit(team, "bot") if entry["operation"] == "remember"]
    assert written[-1]["door"] == "mcp" and record_id in written[-1]["records"]


async def test_another_scopes_records_are_not_found(team: Team) -> None:
    async with remote(team, "other") as client:
        recalled = await call(client, "memory_recall", RECALL)
        got = await call(client, "memory_get", {"id": STORED})
        with pytest.raises(MCPError) as raised:
            await client.read_resource(f"stormbuffer://record/{STORED}")
    async with remote(team, "rita") as client:
        missing = await call(client, "memory_get", {"id": "01900000-0000-7000-8000-00000000dead"})
    for answer in (recalled, got):
        assert answer["ok"] is False and answer["error"] == {"code": "not_found", "message": "record was not found"}
    assert missing["error"]["code"] == "not_found"
    assert "not_found" in str(raised.value) and "Release" not in str(raised.value)
    assert {entry["status"] for entry in audit(team, "other")} == {404}


@pytest.mark.parametrize("name", [None, "gone", "forged"])
async def test_no_revoked_or_wrong_token_is_401_before_any_work(team: Team, name: str | None) -> None:
    team.tokens["forged"] = "sbt_000000000000_" + "A" * 43
    headers = {"Authorization": f"Bearer {team.tokens[name]}"} if name else {}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "probe", "version": "1"}}}  # fmt: skip
    with httpx2.Client(base_url=team.server.base_url, timeout=TIMEOUT, trust_env=False) as http:
        accept = {"Accept": "application/json, text/event-stream"}
        answer = http.post("/mcp", json=initialize, headers={**headers, **accept})
        api = http.get("/v1/records", headers=headers)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == api.headers["www-authenticate"]
    assert answer.headers["www-authenticate"].startswith(
        f'Bearer resource_metadata="{team.server.base_url}/.well-known/oauth-protected-resource"'
    )
    assert answer.json()["error"]["code"] == "unauthorized"
    with pytest.raises(BaseExceptionGroup) as raised:  # the SDK client cannot even initialize
        async with remote(team, name or "forged"):
            pass
    assert raised.group_contains(MCPError, match="error response")


def test_bodies_are_bounded_and_nothing_else_is_answered(team: Team) -> None:
    headers = {"Authorization": f"Bearer {team.tokens['rita']}", "Accept": "application/json, text/event-stream"}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "memory_recall", "arguments": {"query": "x" * 300_000}}}  # fmt: skip
    with httpx2.Client(base_url=team.server.base_url, timeout=TIMEOUT, trust_env=False, headers=headers) as http:
        answer = http.post("/mcp", json=call)
        stream = http.get("/mcp")  # stateless: no stream is held open
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "payload_too_large"
    assert (stream.status_code, stream.json()["error"]["code"]) == (405, "method_not_allowed")


@pytest.mark.parametrize("modern", [False, True], ids=["initialize", "discover"])
async def test_recall_over_http_equals_recall_over_stdio(team: Team, modern: bool) -> None:
    async with remote(team, "rita", modern=modern) as client:
        assert client.discover_result is not None if modern else client.initialize_result is not None
        over_http = await call(client, "memory_recall", RECALL)
        refused = await call(client, "memory_remember", REMEMBER)
    assert refused["error"]["code"] == "permission_denied"
    async with connect(team.server.box, "--local", "--no-daemon") as client:
        over_stdio = await call(client, "memory_recall", RECALL)
    known = {STORED}
    assert over_http["ok"] is True
    assert differences(Masker(known)(over_http), Masker(known)(over_stdio)) == []


def test_no_token_reaches_the_server_log(team: Team) -> None:
    log = "".join(team.server.log)
    assert "POST /mcp" in log or "path=/mcp" in log
    assert not any(token in log for token in team.tokens.values())
    assert "sbt_" not in log and "Traceback" not in log


async def test_stormbuffer_mcp_remote_relays_a_stdio_host(team: Team) -> None:
    params = StdioServerParameters(command=str(STORMBUFFER_MCP), args=["--remote", f"{team.server.base_url}/mcp"],
                                   env={**team.server.box.env, "STORMBUFFER_TOKEN": team.tokens["bot"]},
                                   cwd=team.server.box.cwd)  # fmt: skip
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, read_timeout_seconds=TIMEOUT) as client,
    ):
        await client.initialize()
        recalled = await call(client, "memory_recall", RECALL)
        remembered = await call(client, "memory_remember", {**REMEMBER, "title": "Relayed deploy note"})
        got = await call(client, "memory_get", {"id": remembered["result"]["record_id"]})
    assert recalled["ok"] is True and STORED in json.dumps(recalled["result"])
    assert got["result"]["status"] == "candidate"
    assert [source["actor"] for source in got["result"]["sources"]] == ["bot"]


@pytest.mark.parametrize("name", ["gone", None])
def test_stormbuffer_mcp_remote_without_a_valid_token(team: Team, name: str | None) -> None:
    env = {**team.server.box.env, "STORMBUFFER_TOKEN": team.tokens[name] if name else ""}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "probe", "version": "1"}}}  # fmt: skip
    done = subprocess.run([str(STORMBUFFER_MCP), "--remote", f"{team.server.base_url}/mcp"], env=env,
                          cwd=team.server.box.cwd, input=json.dumps(initialize) + "\n", capture_output=True,
                          text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    if name is None:
        assert (done.returncode, done.stdout) == (1, "")
        assert "set STORMBUFFER_TOKEN" in done.stderr
        return
    answer = json.loads(done.stdout)
    assert answer["id"] == 1 and "error" in answer  # refused with 401: the host gets an error, not a hang
    assert team.tokens["gone"] not in done.stdout + done.stderr and "Traceback" not in done.stderr

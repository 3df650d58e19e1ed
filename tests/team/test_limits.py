"""Per-token rate limits of a real `sbuf serve --team`: past its allowance a token gets 429
`rate_limited` with `Retry-After` on `/v1/` and `/mcp`, before any work, audited; other tokens are
served meanwhile, and the allowance comes back once the window has moved on."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.helpers import tree_digest
from tests.http.conftest import TIMEOUT, sandbox_with_stores, start
from tests.mcp.conftest import call

from .test_server import REMEMBER, STORED, Team

ALLOWANCE = 6


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    box = sandbox_with_stores(tmp_path_factory.mktemp("team-limits") / "sandbox", None)
    server = start(box, "--team", "--rate-limit", f"{ALLOWANCE}/min")
    crew = Team(server)
    for name, role in (("alice", "reviewer"), ("bob", "reviewer"), ("bot", "agent"), ("mcp", "agent")):
        crew.make(name, role)
    server.write(STORED, title="Stored fact", body="A record of this store.\n")
    yield crew
    assert server.stop() == 0


def audit(team: Team, who: str) -> list[dict[str, Any]]:
    done = team.server.box.sbuf("--project", "team", "audit", "--who", who, "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_past_its_allowance_a_token_gets_429_and_others_are_served(team: Team) -> None:
    with team.client("alice") as alice:
        answers = [alice.get(f"/v1/records/{STORED}") for _ in range(ALLOWANCE)]
        refused = alice.get(f"/v1/records/{STORED}")
    assert [answer.status_code for answer in answers] == [200] * ALLOWANCE
    assert refused.status_code == 429
    assert refused.json() == {"error": {"code": "rate_limited", "message": refused.json()["error"]["message"]}}
    assert "Stored fact" not in refused.text
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert team.call("bob", "GET", f"/v1/records/{STORED}").status_code == 200  # a limit per token
    assert team.call(None, "GET", "/v1/records").status_code == 401  # no token: refused before, never counted
    assert team.call(None, "GET", "/.well-known/oauth-protected-resource").status_code == 200
    entries = audit(team, "alice")
    assert [entry["status"] for entry in entries] == [200] * ALLOWANCE + [429]
    assert entries[-1]["operation"] is None and entries[-1]["request"] == f"GET /v1/records/{STORED}"


def test_a_refused_write_does_no_work(team: Team) -> None:
    records = team.server.box.project_root / "records"
    with team.client("bot") as bot:
        for _ in range(ALLOWANCE):
            assert bot.get("/v1/records").status_code == 200
        before = tree_digest(records)
        refused = bot.post("/v1/invoke/remember", json={**REMEMBER, "title": "Refused note"})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert tree_digest(records) == before
    assert audit(team, "bot")[-1]["status"] == 429


@pytest.mark.anyio
async def test_mcp_calls_are_limited_and_audited(team: Team) -> None:
    headers = {"Authorization": f"Bearer {team.tokens['mcp']}"}
    served = 0
    with pytest.raises(BaseExceptionGroup) as raised:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=TIMEOUT, trust_env=False) as http,
            streamable_http_client(f"{team.server.base_url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write, read_timeout_seconds=TIMEOUT) as client,
        ):
            await client.discover()
            for _ in range(ALLOWANCE):
                got = await call(client, "memory_get", {"id": STORED})
                assert got["ok"] is True
                served += 1
    assert raised.group_contains(MCPError)
    assert 0 < served < ALLOWANCE  # the client's own requests count too
    probe = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
             "params": {"name": "memory_get", "arguments": {"id": STORED}}}  # fmt: skip
    with httpx2.Client(base_url=team.server.base_url, timeout=TIMEOUT, trust_env=False) as plain:
        answer = plain.post("/mcp", json=probe, headers={**headers, "Accept": "application/json, text/event-stream"})
    assert answer.status_code == 429 and int(answer.headers["Retry-After"]) >= 1
    entries = audit(team, "mcp")
    assert [entry["request"] for entry in entries if entry["status"] == 200] == ["tools/call memory_get"] * served
    limited = [(entry["door"], entry["request"]) for entry in entries if entry["status"] == 429]
    assert limited[-1] == ("mcp", "POST /mcp")


def test_the_allowance_comes_back_after_retry_after(tmp_path_factory: pytest.TempPathFactory) -> None:
    box = sandbox_with_stores(tmp_path_factory.mktemp("team-limits-s") / "sandbox", None)
    server = start(box, "--team", "--rate-limit", "2/s")
    try:
        crew = Team(server)
        crew.make("alice", "reader")
        with crew.client("alice") as alice:
            statuses = [alice.get("/v1/records").status_code for _ in range(3)]
            refused_at = time.monotonic()
            assert statuses[:2] == [200, 200] and statuses[2] == 429, statuses
            wait = int(alice.get("/v1/records").headers["Retry-After"])
            assert wait == 1
            time.sleep(max(0.0, refused_at + wait - time.monotonic()) + 0.1)
            assert alice.get("/v1/records").status_code == 200
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--team", "--rate-limit", "5/fortnight"), "must be N/s, N/min or N/hour"),
        (("--team", "--rate-limit", "0/min"), "must be N/s, N/min or N/hour"),
        (("--rate-limit", "5/min"), "for a team server: add --team"),
    ],
)
def test_a_bad_rate_limit_is_refused_at_start(tmp_path_factory: pytest.TempPathFactory, args: tuple[str, ...],
                                              message: str) -> None:  # fmt: skip
    box = sandbox_with_stores(tmp_path_factory.mktemp("team-limits-bad") / "sandbox", None)
    done = box.sbuf("--project", "serve", "--port", "0", *args)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr

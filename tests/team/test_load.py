"""Load on a real `sbuf serve --team` over loopback, bounded in count and time: `CLIENTS` concurrent
MCP clients spend `LOAD_S` seconds on a store of `RECORDS` records recalling and remembering; half
way the server is killed with SIGKILL and started again on the same port. No call may fail but
for the server's intended back-pressure (a 429 of a rate limit, where one applies; a write whose
turn at the store did not come within its bounded wait, answered busy and not applied) and, while
the server is down, the connection refused; clients reconnect; every write the server
acknowledged is on disk afterwards, whole, in the name of the token that wrote it, and no write
answered busy is. The server runs with a rate limit per second (`RATE`), so that a limited client waits a
second: a minute's window could keep every client waiting through the outage.

The clients speak MCP's Streamable HTTP to the stateless server themselves (`initialize`, then one
JSON-RPC `tools/call` per POST): what each answer was, and whether a write was acknowledged, is
then exactly what came over the wire."""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest

from stormbuffer.core.codec import parse_markdown
from stormbuffer.core.stores import PlatformDirs, View, resolve_store
from stormbuffer.index.sync import sync_store
from tests.http.conftest import sandbox_with_stores, start
from tests.stores import write_many

from .test_server import Team

RECORDS = 10_000
BASE_PREFIX = "01900000-0000-7000-8000-"  # the ids of the records the store starts with (`write_many`)
CLIENTS = 64
TOKENS = 8  # agent tokens, shared round robin by the clients
LOAD_S = 120.0  # how long the clients keep calling
KILL_AT_S = 50.0  # when the server is killed (SIGKILL) and started again
MAX_CALLS_PER_CLIENT = 1_500  # a bound on the count, whatever the speed
WRITE_EVERY = 4  # every fourth call of a client is a `memory_remember`
CALL_TIMEOUT_S = 30.0  # a guard against a hung answer (it would count as an error), never a speed target
RECONNECT_S = 0.2  # pause before a client tries a server that refused its connection again
RATE = "8/s"  # per token: a window of a second, so a limited client waits a second, not out the kill
RESTARTED_GRACE_S = 5.0  # connection failures are expected from the kill until this long after the restart
ACCEPT = "application/json, text/event-stream"
PROTOCOL = "2025-06-18"


@dataclass
class Tally:
    """What the clients saw: answers by kind, writes acknowledged (record id → token name),
    connection failures with their times, every unexpected answer, when each answer came, and the
    titles of the writes answered busy."""

    answers: Counter[str] = field(default_factory=Counter)
    acknowledged: dict[str, str] = field(default_factory=dict)
    unreachable: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    answered_at: list[float] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)


@dataclass
class Outage:
    """When the server was killed and when its successor listened (monotonic seconds)."""

    killed: float = float("inf")
    restarted: float = float("inf")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def crew(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    """A team server on a port of its own over a project store of `RECORDS` records (written with the
    codec and indexed in process: the cheap way to a big store), and `TOKENS` agent tokens."""
    box = sandbox_with_stores(tmp_path_factory.mktemp("team-load") / "sandbox", None)
    paths = resolve_store(View.PROJECT, box.cwd, PlatformDirs.from_environ(box.env))
    write_many(paths, RECORDS)
    sync_store(paths)
    team = Team(start(box, "--team", "--rate-limit", RATE, "--port", str(free_port())))
    for number in range(TOKENS):
        team.make(f"load-{number}", "agent")
    yield team
    assert team.server.stop() == 0


def rpc(number: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": number, "method": method, "params": params}


def tool_call(client: int, number: int) -> dict[str, Any]:
    """The client's `number`th call: a recall of one topic of the store, or every `WRITE_EVERY`th a
    remember of a title nobody else writes (its claimed actor is not the token's name)."""
    if number % WRITE_EVERY == WRITE_EVERY - 1:
        title = f"Load note {client}-{number}"
        arguments = {"title": title, "kind": "fact", "body": f"{title} was written under load.",
                     "source": {"kind": "conversation", "reference": "load-test", "actor": "human"}}  # fmt: skip
        return rpc(number, "tools/call", {"name": "memory_remember", "arguments": arguments})
    query = {"query": f"topic {(client * 31 + number) % 97}", "budget": 256}
    return rpc(number, "tools/call", {"name": "memory_recall", "arguments": query})


async def run_client(client: int, url: str, token: tuple[str, str], until: float, tally: Tally) -> None:
    """Initialize, then call until `until` or `MAX_CALLS_PER_CLIENT`; after a refused connection,
    reconnect and initialize again."""
    name, secret = token
    headers = {"Authorization": f"Bearer {secret}", "Accept": ACCEPT, "MCP-Protocol-Version": PROTOCOL}
    initialize = rpc(0, "initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                       "clientInfo": {"name": f"load-{client}", "version": "1"}})  # fmt: skip
    initialized = False
    async with httpx2.AsyncClient(headers=headers, timeout=CALL_TIMEOUT_S, trust_env=False) as http:
        for number in range(1, MAX_CALLS_PER_CLIENT + 1):
            if time.monotonic() >= until:
                return
            request = tool_call(client, number) if initialized else initialize
            try:
                answer = await http.post(url, json=request)
            except (httpx2.ConnectError, httpx2.RemoteProtocolError, httpx2.ReadError) as exc:
                tally.unreachable.append(time.monotonic())
                tally.answers[f"unreachable {type(exc).__name__}"] += 1
                initialized = False
                await asyncio.sleep(RECONNECT_S)
                continue
            except httpx2.HTTPError as exc:
                tally.errors.append(f"{request['method']}: {type(exc).__name__}")
                continue
            if answer.status_code == 429:  # a rate limit: intended, wait as told
                tally.answers["429"] += 1
                await asyncio.sleep(min(float(answer.headers.get("Retry-After", "1")), 5.0))
                continue
            if not initialized:
                initialized = answer.status_code == 200 and "result" in answer.json()
                if not initialized:
                    tally.errors.append(f"initialize: {answer.status_code} {answer.text[:200]}")
                continue
            title = request["params"]["arguments"].get("title")
            tally.answers[judge(answer, name, title, tally)] += 1
            tally.answered_at.append(time.monotonic())


def judge(answer: httpx2.Response, name: str, title: str | None, tally: Tally) -> str:
    """The kind of one tool call's answer (a remember's is about `title`); an acknowledged write is
    noted, and so is a write answered busy, and an unexpected answer kept."""
    try:
        envelope = json.loads(answer.json()["result"]["content"][0]["text"])
    except (ValueError, KeyError, IndexError, TypeError):
        tally.errors.append(f"{answer.status_code} {answer.text[:200]}")
        return "error"
    if (
        envelope.get("ok") is False
        and envelope["error"]["code"] == "conflict"
        and "busy" in envelope["error"]["message"]
    ):
        tally.busy.append(title or "")  # its turn at the store did not come in time: not applied, the client may retry
        return "busy"
    if answer.status_code != 200 or envelope.get("ok") is not True:
        tally.errors.append(f"{time.monotonic():.1f}: {answer.status_code} {json.dumps(envelope)[:200]}")
        return "error"
    if envelope["operation"] == "remember":
        tally.acknowledged[envelope["result"]["record_id"]] = name
    return envelope["operation"]


async def kill_and_restart(crew: Team, at: float, outage: Outage) -> None:
    """SIGKILL the server at `at`, then start a successor on the same port over the same store."""
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    old = crew.server
    old.process.send_signal(signal.SIGKILL)
    outage.killed = time.monotonic()
    assert await asyncio.to_thread(old.process.wait, 30) == -signal.SIGKILL
    crew.server = await asyncio.to_thread(start, old.box, "--team", "--rate-limit", RATE, "--port", str(old.port))
    outage.restarted = time.monotonic()


async def load(crew: Team) -> tuple[Tally, Outage]:
    tally, outage = Tally(), Outage()
    began = time.monotonic()
    url = f"{crew.server.base_url}/mcp"
    tokens = itertools.cycle(sorted(crew.tokens.items()))
    clients = [run_client(number, url, next(tokens), began + LOAD_S, tally) for number in range(CLIENTS)]
    await asyncio.gather(kill_and_restart(crew, began + KILL_AT_S, outage), *clients)
    return tally, outage


def test_sixty_four_clients_through_a_sigkill_lose_no_acknowledged_write(crew: Team) -> None:
    tally, outage = asyncio.run(load(crew))
    summary = dict(tally.answers)
    assert tally.errors == [], (summary, outage, tally.errors[:10], tally.errors[-3:])
    assert summary.get("context", 0) > CLIENTS and summary.get("remember", 0) > CLIENTS, summary
    # the clients met the outage, and only the outage, and came back after it
    assert tally.unreachable, (summary, outage, time.monotonic())
    assert all(outage.killed <= moment <= outage.restarted + RESTARTED_GRACE_S for moment in tally.unreachable)
    after = sum(moment > outage.restarted + RESTARTED_GRACE_S for moment in tally.answered_at)
    assert after > CLIENTS, f"only {after} answers after the restart"
    records = crew.server.box.project_root / "records"
    written = {path.stem: parse_markdown(path.read_bytes(), path.name) for path in records.glob("*.md")
               if not path.stem.startswith(BASE_PREFIX)}  # fmt: skip
    for record_id, name in tally.acknowledged.items():
        assert record_id in written, f"acknowledged write {record_id} is missing"
        assert written[record_id].status == "candidate"
        assert [source.actor for source in written[record_id].sources] == [name]
    titles = {record.title for record in written.values()}
    assert not titles & set(tally.busy), "a write answered busy was applied"
    print(f"\n{summary}; {len(tally.acknowledged)} writes acknowledged, {len(tally.busy)} answered busy")
    assert_served_after_restart(crew, list(tally.acknowledged)[-CLIENTS:])


def assert_served_after_restart(crew: Team, record_ids: list[str]) -> None:
    """The successor serves the last writes acknowledged, as the candidates they are."""
    headers = {"Authorization": f"Bearer {crew.tokens['load-0']}", "Accept": ACCEPT}
    with httpx2.Client(base_url=crew.server.base_url, headers=headers, timeout=CALL_TIMEOUT_S, trust_env=False) as http:
        for number, record_id in enumerate(record_ids, 1):
            call = rpc(number, "tools/call", {"name": "memory_get", "arguments": {"id": record_id}})
            answer = http.post("/mcp", json=call)
            for _ in range(10):  # bounded: the rate limit lets a few through every second
                if answer.status_code != 429:
                    break
                time.sleep(float(answer.headers.get("Retry-After", "1")))
                answer = http.post("/mcp", json=call)
            envelope = json.loads(answer.json()["result"]["content"][0]["text"])
            assert envelope["ok"] is True and envelope["result"]["status"] == "candidate", envelope

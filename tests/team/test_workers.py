"""`sbuf serve --team --workers 2` on a real store, spoken to over loopback: connections go to the
two worker processes in turn and stay there (each answer names its worker), both embed queries with
the model opened before they forked, both speak TLS, and a client sees one server — a review-page
session holds on either, a token's rate limit is counted across both, a revoked token is refused by
both at once, MCP and HTTP recall answer — and the server stops whole, leaving no process behind."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from stormbuffer.adapters.http.connections import HEADER_TIMEOUT_S
from tests.http.conftest import TIMEOUT, Server, sandbox_with_stores, start
from tests.mcp.conftest import call

from .test_mcp import RECALL, remote
from .test_server import Team, reader_token, self_signed, team_server

STORED = "01900000-0000-7000-8000-0000000007a1"
RATE = 40  # requests per minute and token
WORKER = re.compile(r"team server worker (\d) listening pid=(\d+)")
ATTEMPTS = 200  # requests sent at most until both workers answered


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, acquired_models: Path) -> Iterator[Team]:
    box = sandbox_with_stores(tmp_path_factory.mktemp("team-workers") / "sandbox", acquired_models)
    server = start(box, "--team", "--workers", "2", "--rate-limit", f"{RATE}/min")
    crew = Team(server)
    for name in ("rita", "burst", "gone", "mcp", "spread", "meaning"):
        crew.make(name, "reader")
    server.write(STORED, title="Release constraint", body="Releases ship on Tuesdays after the magnetar check.\n")
    yield crew
    if server.process.poll() is None:
        assert server.stop() == 0


def fresh(server: Server, headers: dict[str, str] | None = None) -> httpx2.Client:
    """A client opening a new connection for every request, so that any worker may take it."""
    limits = httpx2.Limits(max_keepalive_connections=0)
    return httpx2.Client(base_url=server.base_url, timeout=TIMEOUT, trust_env=False, limits=limits,
                         headers=headers or {})  # fmt: skip


def workers(server: Server) -> dict[str, int]:
    """Each worker's pid by index, from the server's log."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        found = dict(WORKER.findall("".join(server.log)))
        if len(found) == 2:
            return {index: int(pid) for index, pid in found.items()}
        time.sleep(0.05)
    raise AssertionError("".join(server.log))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_review_page_session_holds_on_both_workers(team: Team) -> None:
    server = team.server
    pids = workers(server)
    assert len(set(pids.values())) == 2 and server.process.pid not in pids.values()
    form = {"Origin": server.base_url, "Content-Type": "application/x-www-form-urlencoded"}
    with fresh(server) as client:
        signed = client.post("/sign-in", headers=form, content=f"token={team.tokens['rita']}")
        assert signed.status_code == 303, signed.text
        forms = {}  # each worker's CSRF token of the session's forms
        for _ in range(ATTEMPTS):
            page = client.get(f"/records/{STORED}")
            assert page.status_code == 200 and "Release constraint" in page.text
            forms[page.headers["Stormbuffer-Worker"]] = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
            if len(forms) == 2:
                break
        assert set(forms) == set(pids) == {"1", "2"}
        assert forms["1"] == forms["2"]  # a form one worker served is taken by the other
        session = str(client.cookies[f"stormbuffer_session_{server.port}"])
        sessions = (server.box.project_root / "team" / "sessions.sqlite3").read_bytes()
        assert session.encode() not in sessions  # only its hash is kept
        signed_out = client.post("/sign-out", headers=form, content=f"csrf={forms['1']}")
        assert signed_out.status_code == 303 and signed_out.headers["Location"] == "/sign-in"
        for _ in range(10):
            assert client.get(f"/records/{STORED}").status_code == 303  # signed out on both


def test_a_tokens_rate_limit_counts_requests_on_both_workers(team: Team) -> None:
    answers = []
    with fresh(team.server, {"Authorization": f"Bearer {team.tokens['burst']}"}) as client:
        for _ in range(RATE + 10):
            answer = client.get("/v1/records")
            answers.append(
                (answer.status_code, answer.headers["Stormbuffer-Worker"], answer.headers.get("Retry-After"))
            )
    statuses = [status for status, _, _ in answers]
    assert statuses == [200] * RATE + [429] * 10  # as one process would: the 41st is refused
    assert {worker for status, worker, _ in answers if status == 200} == {"1", "2"}
    assert {worker for status, worker, _ in answers if status == 429} == {"1", "2"}
    assert all(retry is not None and 1 <= int(retry) <= 60 for status, _, retry in answers if status == 429)


def test_a_revoked_token_is_refused_by_both_workers_at_once(team: Team) -> None:
    with fresh(team.server, {"Authorization": f"Bearer {team.tokens['gone']}"}) as client:
        answered = set()
        for _ in range(ATTEMPTS):
            answer = client.get("/v1/records")
            assert answer.status_code == 200
            answered.add(answer.headers["Stormbuffer-Worker"])
            if len(answered) == 2:
                break
        assert answered == {"1", "2"}
        assert team.server.box.sbuf("--project", "team", "token", "revoke", "gone").returncode == 0
        refused = [client.get("/v1/records") for _ in range(20)]
    assert {answer.status_code for answer in refused} == {401}
    assert {answer.headers["Stormbuffer-Worker"] for answer in refused} == {"1", "2"}


@pytest.mark.anyio
async def test_mcp_and_http_recall_answer(team: Team) -> None:
    async with remote(team, "mcp") as client:
        recalled = await call(client, "memory_recall", RECALL)
    assert recalled["ok"] is True and STORED in json.dumps(recalled["result"])
    with fresh(team.server, {"Authorization": f"Bearer {team.tokens['rita']}"}) as http:
        answer = http.post("/v1/invoke/context", json={"version": 1, "query": "magnetar release"})
    assert answer.status_code == 200 and STORED in answer.text


def test_connections_go_to_the_workers_in_turn_and_stay(team: Team) -> None:
    headers = {"Authorization": f"Bearer {team.tokens['spread']}"}
    clients = [httpx2.Client(base_url=team.server.base_url, timeout=TIMEOUT, trust_env=False, headers=headers)
               for _ in range(8)]  # fmt: skip
    try:
        first = [client.get("/v1/records").headers["Stormbuffer-Worker"] for client in clients]  # one connection each
        again = [client.get("/v1/records").headers["Stormbuffer-Worker"] for client in clients]
    finally:
        for client in clients:
            client.close()
    assert sorted(first) == ["1"] * 4 + ["2"] * 4
    assert all(one != other for one, other in zip(first, first[1:], strict=False))  # in turn
    assert again == first  # a client's connection stays with its worker


def test_both_workers_embed_queries_with_the_model_opened_before_they_forked(team: Team) -> None:
    query = {"query": "which weekday do we deploy", "limit": 3}  # no word in common with the record
    answers: dict[str, httpx2.Response] = {}
    deadline = time.monotonic() + TIMEOUT
    with fresh(team.server, {"Authorization": f"Bearer {team.tokens['meaning']}"}) as client:
        while len(answers) < 2:
            answer = client.get("/v1/search", params=query)
            assert answer.status_code == 200, answer.text
            if answer.headers.get("stormbuffer-semantic-fallback") == "vector_projection_incomplete":
                assert time.monotonic() < deadline, "the record was never embedded"
                time.sleep(0.5)
                continue
            answers[answer.headers["Stormbuffer-Worker"]] = answer
    for answer in answers.values():
        assert answer.headers["stormbuffer-retrieval-mode"] == "hybrid"
        assert "stormbuffer-semantic-fallback" not in answer.headers
        assert answer.json()[0]["record_id"] == STORED
    assert answers["1"].json() == answers["2"].json()


def test_both_workers_speak_tls_and_close_a_handshake_that_never_ends(tmp_path: Path) -> None:
    box = sandbox_with_stores(tmp_path / "sandbox", None)
    cert, key = self_signed(tmp_path)
    headers = {"Authorization": f"Bearer {reader_token(box)}"}
    with team_server(box, "--workers", "2", "--tls-cert", str(cert), "--tls-key", str(key)) as address:
        host, port = address.rsplit(":", 1)
        began = time.monotonic()
        silent = socket.create_connection((host, int(port)), timeout=TIMEOUT)  # no handshake, ever
        trusted = ssl.create_default_context(cafile=cert)
        limits = httpx2.Limits(max_keepalive_connections=0)
        with httpx2.Client(base_url=f"https://{address}", verify=trusted, trust_env=False, timeout=TIMEOUT,
                           limits=limits, headers=headers) as client:  # fmt: skip
            answers = [client.get("/v1/records") for _ in range(4)]
        assert [answer.status_code for answer in answers] == [200] * 4
        assert {answer.headers["Stormbuffer-Worker"] for answer in answers} == {"1", "2"}
        silent.settimeout(HEADER_TIMEOUT_S + 5)
        try:
            assert silent.recv(4096) == b""  # closed by its worker, with nothing said
        except ConnectionResetError:
            pass
        assert time.monotonic() - began <= HEADER_TIMEOUT_S + 5
        silent.close()


def test_sigterm_stops_every_worker(team: Team) -> None:
    pids = workers(team.server)
    assert team.server.stop(signal.SIGTERM) == 0
    assert not any(alive(pid) for pid in pids.values())


def test_an_interrupt_stops_every_worker(tmp_path: Path) -> None:
    server = start(sandbox_with_stores(tmp_path / "sandbox", None), "--team", "--workers", "2")
    pids = workers(server)
    assert server.stop(signal.SIGINT) == 0
    assert not any(alive(pid) for pid in pids.values())
    assert "received interrupt signal" in "".join(server.log) and "Traceback" not in "".join(server.log)


def test_a_worker_that_dies_stops_the_server_with_an_error(tmp_path: Path) -> None:
    server = start(sandbox_with_stores(tmp_path / "sandbox", None), "--team", "--workers", "2")
    pids = workers(server)
    os.kill(pids["2"], signal.SIGKILL)
    assert server.process.wait(timeout=TIMEOUT) == 1
    assert not alive(pids["1"])
    assert f"team server worker 2 (pid {pids['2']}) exited with status -9; stopping the server" in "".join(server.log)


def test_workers_stop_when_their_main_process_is_killed(tmp_path: Path) -> None:
    server = start(sandbox_with_stores(tmp_path / "sandbox", None), "--team", "--workers", "2")
    pids = workers(server)
    server.process.kill()
    server.process.wait(timeout=TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while any(alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids.values())


def test_workers_are_for_a_team_server(tmp_path: Path) -> None:
    box = sandbox_with_stores(tmp_path / "sandbox", None)
    refused = box.sbuf("--project", "serve", "--port", "0", "--workers", "2")
    assert refused.returncode != 0 and "are for a team server: add --team" in refused.stderr
    assert "Traceback" not in refused.stderr

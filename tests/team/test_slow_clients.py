"""Slow clients against a real `sbuf serve --team` on loopback: connections sending their headers a
byte at a time and bodies that never finish are closed within the header and body time limits,
while another client is answered promptly all along."""

from __future__ import annotations

import json
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from stormbuffer.adapters.http.connections import HEADER_TIMEOUT_S
from stormbuffer.adapters.http.security import BODY_TIMEOUT_S
from tests.http.conftest import TIMEOUT, sandbox_with_stores, start

from .test_server import Team, self_signed, team_server

TRICKLING = 24  # connections sending their headers one byte at a time
MARGIN_S = 3.0  # what a busy machine may add to a limit before the server acts on it
PROMPT_S = 2.0  # the longest a well-behaved request may wait meanwhile (the limits are 10 s)


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    box = sandbox_with_stores(tmp_path_factory.mktemp("team-slow") / "sandbox", None)
    server = start(box, "--team")
    crew = Team(server)
    crew.make("alice", "reader")
    crew.make("slow", "reader")
    yield crew
    assert server.stop() == 0


def connect(team: Team) -> socket.socket:
    return socket.create_connection(("127.0.0.1", team.server.port), timeout=TIMEOUT)


def gone(conn: socket.socket) -> bool:
    """Whether the server closed `conn` (EOF or reset), without waiting."""
    if not select.select([conn], [], [], 0)[0]:
        return False
    try:
        return conn.recv(4096) == b""
    except ConnectionError:
        return True


def trickle(conns: list[socket.socket], head: bytes, closed_after: dict[int, float], began: float) -> None:
    """Send `head` a byte per round to every connection until the server closes each (noting when)."""
    for offset in range(len(head)):
        if len(closed_after) == len(conns) or time.monotonic() - began > HEADER_TIMEOUT_S + 2 * MARGIN_S:
            return
        for index, conn in enumerate(conns):
            if index in closed_after:
                continue
            try:
                conn.sendall(head[offset : offset + 1])
            except ConnectionError:
                closed_after[index] = time.monotonic() - began
                continue
            if gone(conn):
                closed_after[index] = time.monotonic() - began
        time.sleep(0.25)


def unfinished_body(team: Team, path: str) -> socket.socket:
    """A request with a valid token whose declared body never finishes arriving."""
    conn = connect(team)
    conn.sendall((f"POST {path} HTTP/1.1\r\nHost: {team.server.address}\r\n"
                  f"Authorization: Bearer {team.tokens['slow']}\r\nContent-Type: application/json\r\n"
                  "Accept: application/json, text/event-stream\r\nContent-Length: 400\r\n\r\n"
                  '{"jsonrpc": "2.0", "id": 1,').encode())  # fmt: skip
    return conn


def read_answer(conn: socket.socket, wait_s: float) -> bytes:
    conn.settimeout(wait_s)
    data = b""
    try:
        while chunk := conn.recv(4096):
            data += chunk
    except (TimeoutError, ConnectionError):
        pass
    return data


def test_slow_headers_and_bodies_are_closed_in_time_and_others_are_answered(team: Team) -> None:
    head = (f"GET /v1/records HTTP/1.1\r\nHost: {team.server.address}\r\n"
            f"Authorization: Bearer {team.tokens['slow']}\r\nX-Padding: {'p' * 200}\r\n\r\n").encode()  # fmt: skip
    began = time.monotonic()
    trickling = [connect(team) for _ in range(TRICKLING)]
    bodies = {path: unfinished_body(team, path) for path in ("/mcp", "/v1/invoke/search")}
    closed_after: dict[int, float] = {}
    sender = threading.Thread(target=trickle, args=(trickling, head, closed_after, began), daemon=True)
    sender.start()
    waits = []
    with team.client("alice") as alice:
        while sender.is_alive() and time.monotonic() - began < HEADER_TIMEOUT_S + 2 * MARGIN_S:
            asked = time.monotonic()
            assert alice.get("/v1/records").status_code == 200
            waits.append(time.monotonic() - asked)
            time.sleep(0.25)
    sender.join(TIMEOUT)
    answers = {path: read_answer(conn, BODY_TIMEOUT_S + MARGIN_S - (time.monotonic() - began))
               for path, conn in bodies.items()}  # fmt: skip
    for conn in (*trickling, *bodies.values()):
        conn.close()
    assert len(waits) >= 10 and max(waits) < PROMPT_S, waits
    assert sorted(closed_after) == list(range(TRICKLING)), closed_after  # none was still open
    assert all(HEADER_TIMEOUT_S - 0.5 <= after <= HEADER_TIMEOUT_S + MARGIN_S for after in closed_after.values())
    for path, answer in answers.items():
        assert answer.startswith(b"HTTP/1.1 408 "), (path, answer[:200])
        assert b"request_timeout" in answer and b"connection: close" in answer.lower()
    with team.client("alice") as alice:
        assert alice.get("/v1/records").status_code == 200
    audited = team.server.box.sbuf("--project", "team", "audit", "--who", "slow", "--json").stdout.splitlines()
    assert sorted((entry["request"], entry["status"]) for entry in map(json.loads, audited)) == [
        ("POST /mcp", 408),
        ("POST /v1/invoke/search", 408),
    ]
    log = "".join(team.server.log)
    assert "Traceback" not in log and team.tokens["slow"] not in log


def test_a_tls_handshake_that_never_ends_is_closed_in_time(tmp_path: Path) -> None:
    box = sandbox_with_stores(tmp_path / "sandbox", None)
    cert, key = self_signed(tmp_path)
    with team_server(box, "--tls-cert", str(cert), "--tls-key", str(key)) as address:
        port = int(address.rsplit(":", 1)[1])
        began = time.monotonic()
        silent = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        partial = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        partial.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, never finished
        trusted = ssl.create_default_context(cafile=cert)
        with httpx2.Client(base_url=f"https://{address}", verify=trusted, trust_env=False, timeout=TIMEOUT) as client:
            asked = time.monotonic()
            assert client.get("/v1/records").status_code == 401
            assert time.monotonic() - asked < PROMPT_S
        for conn in (silent, partial):
            conn.settimeout(max(0.01, HEADER_TIMEOUT_S + MARGIN_S - (time.monotonic() - began)))
            try:
                assert conn.recv(4096) == b""  # closed by the server, with nothing said
            except ConnectionResetError:
                pass
            assert HEADER_TIMEOUT_S - 0.5 <= time.monotonic() - began <= HEADER_TIMEOUT_S + MARGIN_S
            conn.close()

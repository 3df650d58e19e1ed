"""What a client may cost a running `sbuf serve`: a body is read up to 256 KiB whatever its framing
(review-page forms too, before their CSRF token is looked at), within a time limit; headers have a
time limit; connections are capped below the descriptor limit, and half-sent requests cannot keep a
real request out. Real servers on loopback ports; every loop is bounded in count and time."""

from __future__ import annotations

import resource
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stormbuffer.adapters.http.connections import HEADER_TIMEOUT_S
from stormbuffer.adapters.http.security import BODY_TIMEOUT_S

from .conftest import TIMEOUT, Server, sandbox_with_stores, start

MIB = 1 << 20
HALF_SENT = 110
FD_LIMIT = 100


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    served = start(sandbox_with_stores(tmp_path, None))
    yield served
    assert served.stop() == 0


def peak_rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


def answer_head(conn: socket.socket) -> bytes:
    """The status line and headers the server sent (up to the blank line), or what came before EOF."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def chunked_upload(server: Server, path: str, content_type: str, total_mib: int) -> tuple[bytes, float]:
    """POST `total_mib` MiB in 1 MiB chunks without a length; the answer's head and seconds to it."""
    head = (f"POST {path} HTTP/1.1\r\nHost: {server.address}\r\nOrigin: http://{server.address}\r\n"
            f"Authorization: Bearer {server.token}\r\nContent-Type: {content_type}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()  # fmt: skip
    chunk = f"{MIB:x}\r\n".encode() + b"csrf=" + b"a" * (MIB - 5) + b"\r\n"
    conn = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)

    def send() -> None:
        try:
            conn.sendall(head)
            for _ in range(total_mib):
                conn.sendall(chunk)
            conn.sendall(b"0\r\n\r\n")
        except OSError:  # the server answered and closed: the rest is never read
            pass

    began = time.monotonic()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        got = answer_head(conn)
        elapsed = time.monotonic() - began
    finally:
        conn.close()
        sender.join(TIMEOUT)
    return got, elapsed


@pytest.mark.parametrize(("path", "content_type"), [
    ("/review/decide", "application/x-www-form-urlencoded"),
    ("/v1/records", "application/json"),
])  # fmt: skip
def test_a_40_mib_chunked_body_is_refused_early_and_costs_no_memory(
    server: Server, path: str, content_type: str
) -> None:
    with server.client() as client:  # the server has served a page and a write before: its usual peak
        assert client.get("/v1/records").status_code == 200
    before = peak_rss_kib(server.process.pid)
    head, elapsed = chunked_upload(server, path, content_type, 40)
    assert head.startswith(b"HTTP/1.1 413 "), head[:200]
    assert elapsed < 10.0, elapsed  # a guard against reading it all, not a speed target
    grown_mib = (peak_rss_kib(server.process.pid) - before) / 1024
    assert grown_mib < 16, f"peak RSS grew by {grown_mib:.1f} MiB"
    assert server.process.poll() is None


def test_a_form_without_its_token_is_refused_before_it_is_parsed(server: Server) -> None:
    """A form whose first field is not the page's CSRF token is 403 whatever it holds: 200 000 fields
    are never split, and a body over the bound is 413 before any of it is looked at."""
    fields = "&".join(f"id={index}" for index in range(200_000)).encode()[:250_000]
    head = (f"POST /review/decide HTTP/1.1\r\nHost: {server.address}\r\nOrigin: http://{server.address}\r\n"
            f"Authorization: Bearer {server.token}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {len(fields)}\r\nConnection: close\r\n\r\n").encode()  # fmt: skip
    with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as conn:
        conn.sendall(head + fields)
        assert answer_head(conn).startswith(b"HTTP/1.1 403 ")


def limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def test_half_sent_requests_cannot_starve_a_real_one(tmp_path: Path) -> None:
    """Under `ulimit -n 100`, 110 connections that never finish their headers and one that never
    finishes its body: a real request is answered at once, the oldest half-sent connections are
    closed to make room, the rest when their header time is up, and the slow body gets 408."""
    server = start(sandbox_with_stores(tmp_path, None), preexec_fn=limit_descriptors)
    try:
        slow_body = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
        slow_body.sendall((f"POST /v1/invoke/search HTTP/1.1\r\nHost: {server.address}\r\n"
                           f"Authorization: Bearer {server.token}\r\nContent-Type: application/json\r\n"
                           "Content-Length: 100\r\n\r\n{\"version\":").encode())  # fmt: skip
        half_sent = []
        for _ in range(HALF_SENT):
            conn = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
            conn.sendall(f"GET /v1/records HTTP/1.1\r\nHost: {server.address}\r\n".encode())
            half_sent.append(conn)
        began = time.monotonic()
        with server.client() as client:
            assert client.get("/v1/records").status_code == 200
        assert time.monotonic() - began < HEADER_TIMEOUT_S / 2  # answered long before any timeout
        time.sleep(0.5)
        closed_early = sum(closed(conn, 0.01) for conn in half_sent)
        assert closed_early >= HALF_SENT - FD_LIMIT // 2, closed_early  # the cap made room by closing the oldest
        deadline = time.monotonic() + HEADER_TIMEOUT_S + 5
        assert all(closed(conn, max(0.01, deadline - time.monotonic())) for conn in half_sent)
        slow_body.settimeout(max(BODY_TIMEOUT_S - (time.monotonic() - began), 0) + 5)
        assert answer_head(slow_body).startswith(b"HTTP/1.1 408 ")
        for conn in (*half_sent, slow_body):
            conn.close()
        with server.client() as client:
            assert client.get("/v1/records").status_code == 200
    finally:
        assert server.stop() == 0
    log = "".join(server.log)
    assert "Traceback" not in log and "ERROR" not in log  # never out of descriptors, even while accepting


def closed(conn: socket.socket, wait_s: float) -> bool:
    """Whether the server closed `conn` (EOF or reset) within `wait_s` seconds."""
    conn.settimeout(wait_s)
    try:
        return conn.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True

"""What the daemon does with a connection that does not play by the rules, through its real socket:
a silent connection is closed after the hello timeout and never keeps the daemon from its idle
exit, a `length` that is not an integer from 0 to the bound is refused before anything is read,
and text nested deeper than the bound is answered like any other request that is not JSON."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from typing import Any

import pytest

from stormbuffer.daemon.runtime import PROTOCOL, install_identity
from stormbuffer.daemon.server import HELLO_TIMEOUT_S
from stormbuffer.protocol.jsontext import MAX_DEPTH
from tests.cli.conftest import sandbox  # noqa: F401 - a fixture shared with the CLI tests
from tests.daemon.sessions import session
from tests.daemon.test_daemon import WAIT_S, alive, place, status, wait_until
from tests.mcp.conftest import ACTIVE_ID, RawServer, Store, request, store  # noqa: F401 - fixture

DEEP = "[" * 200_000  # a 200 KB line: inside every size bound, far past the nesting bound


def connect(store: Store) -> socket.socket:  # noqa: F811
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(HELLO_TIMEOUT_S + WAIT_S)
    sock.connect(str(place(store.box).socket))
    return sock


def hello(store: Store, door: str, **fields: Any) -> dict[str, Any]:  # noqa: F811
    env = store.box.env
    message = {"protocol": PROTOCOL, "install": install_identity(env), "door": door, "cwd": str(store.box.cwd),
               "env": {name: env[name] for name in ("HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")}, "view": "project",
               **fields}  # fmt: skip
    return message


def test_a_silent_connection_is_closed_after_the_hello_timeout(store: Store) -> None:  # noqa: F811
    assert session(store.box)[0] == 0
    with connect(store) as sock:
        started = time.monotonic()
        assert sock.recv(1) == b""  # the daemon closed it, without a word
        waited = time.monotonic() - started
    assert HELLO_TIMEOUT_S - 1 <= waited < HELLO_TIMEOUT_S + WAIT_S
    running = status(store.box.env)
    assert running is not None and running["sessions"] == 0


def test_a_silent_connection_does_not_keep_the_daemon_from_its_idle_exit(store: Store) -> None:  # noqa: F811
    env = store.box.env_with(STORMBUFFER_DAEMON_IDLE_S="1")
    assert session(store.box, env=env)[0] == 0
    running = status(env)
    assert running is not None
    with connect(store):  # open, silent, for as long as the daemon lives
        wait_until(lambda: not alive(running["pid"]), "the idle daemon to exit despite a silent connection")
    assert HELLO_TIMEOUT_S > 2  # so the exit above came from the idle time, not from the hello timeout


@pytest.mark.parametrize("door", ["invoke", "human"])
def test_a_length_that_is_not_a_bounded_integer_is_refused(store: Store, door: str) -> None:  # noqa: F811
    assert session(store.box)[0] == 0
    before = status(store.box.env)
    assert before is not None
    operation = "search" if door == "invoke" else "list"
    for length in (-1, -(2**40), 1.5, "10", True, None, [4], 2**40):
        with connect(store) as sock:
            sock.sendall(json.dumps(hello(store, door, operation=operation, length=length)).encode() + b"\n")
            reader = sock.makefile("rb")
            assert json.loads(reader.readline()) == {"ok": False, "reason": "bad_length"}, length
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(b"x" * (8 << 20))  # what a negative length once made the daemon hold
            try:
                rest = reader.read()
            except ConnectionResetError:  # closed with our bytes unread: the kernel says so with a reset
                rest = b""
            assert rest == b"", length  # closed: nothing more was read, nothing answered
    after = status(store.box.env)
    assert after is not None and after["pid"] == before["pid"]
    assert after["rss_kib"] <= before["rss_kib"] + 8 * 1024


def test_deep_nesting_through_sbuf_invoke_and_the_daemon_is_answered_as_invalid_json(store: Store) -> None:  # noqa: F811
    store.seed()
    assert session(store.box)[0] == 0  # a daemon serves the calls below
    served = status(store.box.env)["served"]  # type: ignore[index]
    for operation in ("search", "remember"):
        done = store.box.sbuf("--project", "invoke", operation, input=DEEP)
        assert done.stderr == "" and done.returncode == 1
        error = json.loads(done.stdout)["error"]
        assert error == {"code": "invalid_json", "message": "stdin must contain one JSON object"}
    assert status(store.box.env)["served"] >= served + 2  # type: ignore[index]
    assert store.invoke("get", {"version": 1, "id": ACTIVE_ID}, "--project")["ok"] is True


@pytest.mark.parametrize("flags", [(), ("--no-daemon",)], ids=["daemon", "in-process"])
def test_deep_nesting_through_stormbuffer_mcp_is_a_parse_error_and_the_session_goes_on(
    store: Store,  # noqa: F811
    flags: tuple[str, ...],
) -> None:
    store.seed()
    server = RawServer(store.box, "--stdio", "--project", *flags)
    assert "result" in server.initialize()
    for depth in (MAX_DEPTH + 1, 200_000):
        server.send('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": ' + "[" * depth)
        answer = server.receive()
        assert answer["id"] == 7 and answer["error"]["code"] == -32700
        assert f"more than {MAX_DEPTH} levels" in answer["error"]["message"]
    server.send("{" * 200_000)  # no id to read: a null id
    assert server.receive()["id"] is None
    server.send(request(8, "tools/call", {"name": "memory_get", "arguments": {"id": ACTIVE_ID}}))
    assert server.receive()["result"]["structuredContent"]["ok"] is True
    code, rest, stderr = server.close()
    assert (code, rest, stderr) == (0, [], "")
    assert (status(store.box.env) is None) == bool(flags)

"""The doors' side of the daemon: reach it (starting it when asked), relay MCP bytes, ask one
`invoke` or human command, ask for its status or its end. Standard library only: never the SDK, never NumPy.

Every connection opens with one JSON line (`hello`: the door, this install's identity, the working
directory and the variables that select stores) answered by one JSON line. A daemon of another
install answers `other_install` and gives way; the door then starts a fresh one.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from stormbuffer.protocol.jsontext import loads

from .runtime import (
    MAX_HELLO_BYTES,
    MAX_HUMAN_PAYLOAD,
    PROTOCOL,
    SESSION_END,
    Runtime,
    disabled,
    encode_line,
    install_identity,
    runtime,
    same_user,
)
from .runtime import session_env as selecting_env

START_WAIT_S = 10.0  # a cold daemon on a loaded host: interpreter, SDK import
HELLO_WAIT_S = 30.0
POLL_S = 0.005
LINE_LIMIT = 1 << 20  # longer lines are relayed in pieces and not looked into
DAEMON_STOPPED = "the memory daemon stopped before answering; start the MCP server again"
INTERNAL_ERROR = -32603

Reply = dict[str, Any]


class Unreachable(Exception):
    """No daemon could be reached (or started): the door serves in-process."""


class Connection:
    """One accepted connection, after the hello: the socket and its buffered reader."""

    def __init__(self, sock: socket.socket, reply: Reply) -> None:
        self.sock = sock
        self.reply = reply
        self.reader = sock.makefile("rb")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def hello(door: str, env: Mapping[str, str], **fields: Any) -> dict[str, Any]:
    """The first line of a connection (`fields` add to it or override it)."""
    try:
        cwd = os.getcwd()
    except OSError:  # a deleted working directory: no store resolves, as in-process
        cwd = ""
    return {
        "protocol": PROTOCOL,
        "install": install_identity(env),
        "door": door,
        "cwd": cwd,
        "env": selecting_env(env),
        **fields,
    }


def open_door(message: Mapping[str, Any], env: Mapping[str, str], *, start: bool) -> Connection:
    """A connection whose hello was accepted; with `start`, a daemon is started when none serves
    (or when the one serving belongs to another install). Raises Unreachable."""
    if disabled(env):
        raise Unreachable()
    place = runtime(env, create=start)
    if place is None:
        raise Unreachable()
    connection = _greet(place, message)
    if connection is not None and connection.reply.get("reason") != "other_install":
        return connection
    if connection is not None:
        connection.close()
        _wait_gone(place)
    if not start:
        raise Unreachable()
    spawn(place, env)
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        connection = _greet(place, message)
        if connection is not None and connection.reply.get("reason") != "other_install":
            return connection
        if connection is not None:
            connection.close()
        time.sleep(POLL_S)
    raise Unreachable()


def _greet(place: Runtime, message: Mapping[str, Any]) -> Connection | None:
    """Send the hello to the daemon at `place`; None when none listens there (or not ours)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(os.fspath(place.socket))
        if not same_user(sock):  # never another user's daemon
            raise OSError("daemon of another user")
        sock.settimeout(HELLO_WAIT_S)
        sock.sendall(encode_line(message))
        connection = Connection(sock, {})
        line = connection.reader.readline(MAX_HELLO_BYTES)
        reply = loads(line) if line.endswith(b"\n") else None
        if not isinstance(reply, dict):
            connection.close()
            return None
        sock.settimeout(None)
        connection.reply = reply
        return connection
    except (OSError, ValueError):
        sock.close()
        return None


def _wait_gone(place: Runtime) -> None:
    """Wait (bounded) until the daemon that gave way has released its socket path."""
    deadline = time.monotonic() + START_WAIT_S
    while place.socket.exists() and time.monotonic() < deadline:
        time.sleep(POLL_S)


def spawn(place: Runtime, env: Mapping[str, str]) -> None:
    """Start a daemon detached from this process (its own session, no terminal), logging to the
    runtime directory. Of two started at once, one serves and the other exits."""
    import subprocess

    with open(os.open(place.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "stormbuffer.daemon"],
            env=dict(env),
            cwd=place.directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )


def start(env: Mapping[str, str]) -> None:
    """Start a daemon for later calls unless one serves (or none may be used); never waits for it."""
    place = None if disabled(env) else runtime(env, create=True)
    if place is None:
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(os.fspath(place.socket))
    except OSError:
        spawn(place, env)
    finally:
        probe.close()


def ask(door: str, env: Mapping[str, str]) -> Reply | None:
    """The reply of a running daemon to a control door (`status`, `stop`); None when none runs."""
    try:
        connection = open_door(hello(door, env), env, start=False)
    except Unreachable:
        return None
    try:
        return connection.reply
    finally:
        connection.close()


def stop(env: Mapping[str, str]) -> int | None:
    """Stop the running daemon and wait (bounded) until it has exited; its pid, None when none ran."""
    reply = ask("stop", env)
    place = runtime(env)
    if reply is None or place is None:
        return None
    pid = int(reply.get("pid", 0))
    deadline = time.monotonic() + START_WAIT_S
    while (running(place) or _alive(pid)) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return pid


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie waiting for its parent does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def running(place: Runtime) -> bool:
    """Whether a daemon holds the runtime directory's lock (it does for its whole life)."""
    import fcntl

    try:
        fd = os.open(place.lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


# ---- invoke ------------------------------------------------------------------------------------


def invoke(operation: str, view: str, data: bytes, env: Mapping[str, str]) -> tuple[str, bool, list[str]]:
    """The answer of a running daemon to one `sbuf invoke`: the line, whether it is `ok`, schema
    problems. Raises Unreachable when no daemon took the request (the caller answers it itself)."""
    connection = open_door(hello("invoke", env, operation=operation, view=view, length=len(data)), env, start=False)
    try:
        if connection.reply.get("ok") is not True:
            raise Unreachable()
        try:
            connection.sock.sendall(data)
            answer = loads(connection.reader.read())
            return str(answer["line"]), bool(answer["ok"]), [str(problem) for problem in answer["problems"]]
        except (OSError, ValueError, KeyError, TypeError):  # the request was sent: it must not run twice
            from stormbuffer.protocol.invoke import encode, failure

            line = encode(failure(operation, "internal_error", "the memory daemon stopped before answering"))
            return line, False, []
    finally:
        connection.close()


def human(operation: str, view: str, payload: bytes, env: Mapping[str, str]) -> Reply:
    """The reply of a running daemon to one human command (`add`, `list`; see `daemon.human`); never
    starts one. Raises Unreachable when no daemon took the command (the caller runs it itself). Once
    the payload is sent the command may have run, so a daemon that stops then answers `stopped`."""
    if len(payload) > MAX_HUMAN_PAYLOAD:
        raise Unreachable()
    message = hello("human", env, operation=operation, view=view, length=len(payload))
    connection = open_door(message, env, start=False)
    try:
        if connection.reply.get("ok") is not True:
            raise Unreachable()
        try:
            connection.sock.sendall(payload)
            reply = loads(connection.reader.readline())
        except (OSError, ValueError):
            reply = None
        return reply if isinstance(reply, dict) else {"ok": False, "failure": "stopped"}
    finally:
        connection.close()


# ---- MCP ---------------------------------------------------------------------------------------


class Requests:
    """The ids of the host's requests not yet answered (or cancelled), seen in the relayed lines."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, Any] = {}
        self.any = False  # the host sent at least one request

    def from_host(self, line: bytes) -> None:
        message = _message(line)
        if message is None:
            return
        with self._lock:
            if "method" in message and "id" in message:
                self.any = True
                self._open[_key(message["id"])] = message["id"]
            elif message.get("method") == "notifications/cancelled" and isinstance(message.get("params"), dict):
                self._open.pop(_key(message["params"].get("requestId")), None)

    def from_daemon(self, line: bytes) -> None:
        message = _message(line)
        if message is not None and "method" not in message and "id" in message:
            with self._lock:
                self._open.pop(_key(message["id"]), None)

    def unanswered(self) -> list[Any]:
        with self._lock:
            return list(self._open.values())


def _message(line: bytes) -> dict[str, Any] | None:
    try:
        message = loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _key(request_id: Any) -> str:
    return json.dumps(request_id)


def pieces(read: Any, size: int = 65536) -> Iterator[tuple[bytes, bool]]:
    """(bytes, whether they end a line of at most LINE_LIMIT bytes) from `read(size)` until EOF."""
    pending = b""
    long_line = False
    while chunk := read(size):
        pending += chunk
        while (end := pending.find(b"\n")) >= 0:
            yield pending[: end + 1], not long_line
            pending = pending[end + 1 :]
            long_line = False
        if len(pending) > LINE_LIMIT:
            yield pending, False
            pending, long_line = b"", True
    if pending:
        yield pending, False


def relay_mcp(connection: Connection, stdin: int = 0, stdout: int = 1) -> tuple[bool, bool]:
    """Relay the host's stdio and the daemon's session until the daemon ends it. Returns whether the
    session ended normally (the daemon's `SESSION_END` line; else the daemon went away, and the
    requests still open were answered with a JSON-RPC error) and whether the host sent any request."""
    requests = Requests()

    def host_to_daemon() -> None:
        try:
            for piece, whole in pieces(lambda size: os.read(stdin, size)):
                if whole:
                    requests.from_host(piece)
                connection.sock.sendall(piece)
            connection.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=host_to_daemon, daemon=True).start()
    ended = False
    try:
        for piece, whole in pieces(connection.reader.read1):
            if whole and piece == SESSION_END:
                ended = True
                break
            if whole:
                requests.from_daemon(piece)
            _write_all(stdout, piece)
    except OSError:
        pass
    if not ended:
        for request_id in requests.unanswered():
            error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": INTERNAL_ERROR, "message": DAEMON_STOPPED}}
            _write_all(stdout, encode_line(error))
        return False, requests.any
    return True, requests.any


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]

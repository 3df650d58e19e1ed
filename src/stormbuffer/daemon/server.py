"""The daemon: one process per user that serves every door's connections on its Unix socket.

It keeps what is expensive to start: the MCP SDK, the model (one per model cache, shared by every
session), the projections and vector matrices the retrieval layer caches, and one file watcher per
store. Each connection says which door it is in its hello: `mcp` (an MCP session on the SDK with
that relay's view, write grant, working directory and environment), `invoke` (one `sbuf invoke`),
`human` (one `sbuf add` or `sbuf list`, see `human`), `status` or `stop`. Store operations of all
sessions run one at a time in one worker thread, in the order they arrive, so the retrieval caches
are never used from two threads.

A service that should live as long as the daemon (for example an HTTP door) is a coroutine taking
the `Shared` state, passed to `Daemon(services=...)`: it runs in the daemon's task group and builds
its sessions with `Shared.session`, like the doors here.

The daemon exits after `STORMBUFFER_DAEMON_IDLE_S` seconds without a connection (900 by default),
on `sbuf daemon stop`, on SIGTERM, and when a door of another install asks for it (it stops
listening at once, finishes its open sessions, then exits).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from stormbuffer import __version__
from stormbuffer.protocol.jsontext import loads

from .runtime import (
    MAX_HELLO_BYTES,
    MAX_HUMAN_PAYLOAD,
    PROTOCOL,
    SESSION_END,
    Runtime,
    encode_line,
    identity_record,
    idle_seconds,
    install_identity,
    runtime,
    same_user,
)

MAX_CONNECTIONS = 128  # connections served at once; more wait in the listen backlog
HELLO_TIMEOUT_S = 10.0  # a connection silent for longer is closed, never counted as a session
PAYLOAD_TIMEOUT_S = 30.0  # for the bytes a hello announced (`length`)
MAX_LOG_BYTES = 1 << 20
VALIDATE_ENV = "STORMBUFFER_VALIDATE_OUTPUT"

logger = logging.getLogger("stormbuffer.daemon")

Service = Callable[["Shared"], Coroutine[Any, Any, None]]


@dataclass
class Shared:
    """What every session of the daemon shares: the models, the store watchers, the one worker."""

    worker: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(1))
    models: dict[Path, Any] = field(default_factory=dict)  # cache dir -> WarmEmbedder
    freshness: Any = None  # the FreshnessRegistry, made on first use
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def session(self, view: str, cwd: str, env: Mapping[str, str], *, acquire: bool) -> Any:
        """The protocol session of a caller: its view, store, the shared model of its cache and the
        shared watchers. `acquire`: whether a model never prepared is prepared (MCP) or the read
        answers lexically (`sbuf invoke`). Raises when the store cannot be resolved."""
        from stormbuffer.adapters.mcp.warm import WarmEmbedder
        from stormbuffer.core.locks import lock_wait_from
        from stormbuffer.core.stores import PlatformDirs, View, resolve_store
        from stormbuffer.index.freshness import FreshnessRegistry
        from stormbuffer.index.readers import keep_warm
        from stormbuffer.protocol.session import Session

        if not Path(cwd).is_absolute():  # never the daemon's own working directory
            raise ValueError("no working directory")
        selected_view = View(view)
        dirs = PlatformDirs.from_environ(env)
        selected = resolve_store(selected_view, Path(cwd), dirs)
        with self._lock:
            model = self.models.setdefault(selected.cache_dir, WarmEmbedder(selected.cache_dir))
            if self.freshness is None:
                self.freshness = FreshnessRegistry()
                keep_warm()
        slot = model if acquire else _Prepared(model)
        return Session(selected_view, selected, dirs, slot, self.freshness, lock_wait=lock_wait_from(env))

    def embedding(self) -> bool:
        """Whether a store's backlog is being embedded (which keeps the daemon from its idle exit)."""
        return self.freshness is not None and bool(self.freshness.embedding())

    def close(self) -> None:
        if self.freshness is not None:
            self.freshness.close()


class _Prepared:
    """A shared model slot that never prepares a model, only opens one `sbuf init` prepared."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def get(self) -> Any:
        return self._model.get(acquire=False)


class Connection:
    """One accepted socket with its buffered reader and writer."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(True)
        self.sock = sock
        self.reader: io.BufferedReader = sock.makefile("rb")

    async def read(self, size: int, *, timeout: float, line: bool = False) -> bytes | None:
        """Up to `size` bytes (with `line`, up to the end of a line), read in a worker thread; None
        when `timeout` ran out first (a read still blocked then ends when the connection closes)."""
        read = self.reader.readline if line else self.reader.read
        with anyio.move_on_after(timeout):
            return await anyio.to_thread.run_sync(read, size, abandon_on_cancel=True)
        return None

    def reply(self, message: Mapping[str, Any]) -> None:
        self.sock.sendall(encode_line(message))

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes a read still blocked in a worker thread
            self.sock.shutdown(socket.SHUT_RDWR)
        self.reader.close()
        self.sock.close()


def payload_length(message: Mapping[str, Any], bound: int) -> int | None:
    """The hello's `length`: an integer from 0 to `bound` (0 when absent); None for anything else."""
    length = message.get("length", 0)
    if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= bound:
        return None
    return length


class Daemon:
    def __init__(self, place: Runtime, env: Mapping[str, str], services: Sequence[Service] = ()) -> None:
        self.place = place
        self.identity = install_identity(env)
        self._identity_record = identity_record(env)
        self.idle_s = idle_seconds(env)
        self.services = services
        self.shared = Shared()
        self.started = time.time()
        self.sessions = 0
        self.served = 0
        self._last_active = time.monotonic()
        self._listener: socket.socket | None = None
        self._lock_fd: int | None = None
        self._slots = anyio.CapacityLimiter(MAX_CONNECTIONS)
        self._stopping = False
        self._tasks: anyio.abc.TaskGroup | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def claim(self) -> bool:
        """Take the runtime directory's lock and bind the socket; False when another daemon serves."""
        fd = os.open(self.place.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd
        self.place.socket.unlink(missing_ok=True)
        self._write_identity()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(os.fspath(self.place.socket))
        os.chmod(self.place.socket, 0o600)
        listener.listen(64)
        listener.setblocking(False)
        self._listener = listener
        return True

    def _write_identity(self) -> None:
        """Write the identity file whole (private, then renamed into place) before the socket exists."""
        staging = self.place.identity.with_suffix(".tmp")
        staging.unlink(missing_ok=True)
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with open(fd, "wb") as file:
            file.write(encode_line(self._identity_record))
        os.replace(staging, self.place.identity)

    def give_way(self) -> None:
        """Stop listening and free the socket path and lock for a successor; open sessions go on."""
        if self._listener is not None:
            anyio.notify_closing(self._listener)
            self._listener.close()
            self._listener = None
            self.place.socket.unlink(missing_ok=True)
            self.place.identity.unlink(missing_ok=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def stop(self) -> None:
        """End the daemon now: no new connections, open sessions are cut."""
        self._stopping = True
        self.give_way()
        if self._tasks is not None:
            self._tasks.cancel_scope.cancel()

    async def serve(self) -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = MAX_CONNECTIONS * 2 + 8
        try:
            async with anyio.create_task_group() as tasks:
                self._tasks = tasks
                tasks.start_soon(self._idle_exit)
                tasks.start_soon(self._warm_imports)
                for service in self.services:
                    tasks.start_soon(service, self.shared)
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    tasks.start_soon(self._on_signals, signals)
                    await self._accept(tasks)
        finally:
            self.give_way()
            self.shared.close()

    async def _on_signals(self, signals: Any) -> None:
        async for _signal in signals:
            self.stop()

    async def _accept(self, tasks: anyio.abc.TaskGroup) -> None:
        while self._listener is not None:
            try:
                await anyio.wait_readable(self._listener)
                sock, _address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except (OSError, ValueError, anyio.ClosedResourceError):  # the listener was closed (give_way)
                break
            self._last_active = time.monotonic()
            tasks.start_soon(self._serve_connection, sock)
        while self.sessions and not self._stopping:  # gave way: finish the open sessions, then exit
            await anyio.sleep(0.05)
        tasks.cancel_scope.cancel()

    async def _idle_exit(self) -> None:
        """Exit after `idle_s` without a connection and once no backlog is being embedded (a store's
        reads are not left to embed it again), or once the socket was removed (its directory deleted,
        for example): no door could reach this daemon any more."""
        while True:
            await anyio.sleep(min(1.0, self.idle_s / 4))
            if self._listener is not None and not self.place.socket.exists():
                logger.info("the socket was removed: exiting")
                self.stop()
                return
            if (
                not self.sessions
                and time.monotonic() - self._last_active >= self.idle_s
                and not self.shared.embedding()
            ):
                logger.info("idle for %.0f s: exiting", self.idle_s)
                self.stop()
                return

    async def _warm_imports(self) -> None:
        """Import what the doors need, so the first session skips it."""
        for module in ("stormbuffer.adapters.mcp.server", "stormbuffer.protocol.invoke", "stormbuffer.retrieval"):
            await anyio.to_thread.run_sync(_import, module, limiter=self.shared.worker)

    # -- connections ----------------------------------------------------------------------

    async def _serve_connection(self, sock: socket.socket) -> None:
        """Serve one connection; it counts as a session (keeping the daemon from its idle exit) only
        once its hello arrived."""
        async with self._slots:
            connection = Connection(sock)
            try:
                message = await self._hello(connection) if same_user(sock) else None
                if message is not None:
                    self.sessions += 1
                    try:
                        await self._door(connection, message)
                    finally:
                        self.sessions -= 1
                        self.served += 1
                        self._last_active = time.monotonic()
            except Exception as exc:  # one broken connection never ends the daemon
                logger.warning("connection ended: %s", type(exc).__name__)
            finally:
                connection.close()

    async def _hello(self, connection: Connection) -> dict[str, Any] | None:
        """The connection's hello, read within `HELLO_TIMEOUT_S`; None when none came (a line that is
        not a hello of this protocol is answered `bad_hello`)."""
        line = await connection.read(MAX_HELLO_BYTES, timeout=HELLO_TIMEOUT_S, line=True)
        if line is None:
            return None
        try:
            message = loads(line) if line.endswith(b"\n") else None
        except ValueError:
            message = None
        if not isinstance(message, dict) or message.get("protocol") != PROTOCOL:
            connection.reply({"ok": False, "reason": "bad_hello"})
            return None
        return message

    async def _door(self, connection: Connection, message: dict[str, Any]) -> None:
        door = message.get("door")
        if door == "status":
            connection.reply({"ok": True, **self.status()})
            return
        if door == "stop":
            connection.reply({"ok": True, "pid": os.getpid()})
            self.stop()
            return
        if message.get("install") != self.identity:
            logger.info("a door of another install connected: giving way")
            connection.reply({"ok": False, "reason": "other_install"})
            self.give_way()
            return
        if door == "mcp":
            await self._mcp(connection, message)
        elif door == "invoke":
            await self._invoke(connection, message)
        elif door == "human":
            await self._human(connection, message)
        else:
            connection.reply({"ok": False, "reason": "unknown_door"})

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "version": __version__,
            "install": self.identity,
            "sessions": self.sessions - 1,  # not counting the asking connection
            "served": self.served,
            "uptime_s": round(time.time() - self.started, 1),
            "idle_exit_s": self.idle_s,
            "rss_kib": _rss_kib(),
            "open_files": _open_files(),
        }

    async def _mcp(self, connection: Connection, message: Mapping[str, Any]) -> None:
        from stormbuffer.adapters.mcp.server import StormbufferServer, run_session
        from stormbuffer.adapters.mcp.tools import WriteGrant
        from stormbuffer.core.errors import StoreError

        try:
            env = dict(message["env"])
            session = self.shared.session(str(message["view"]), str(message["cwd"]), env, acquire=True)
            grant = WriteGrant(message["grant"])
        except StoreError as exc:  # its message names what is wrong with the store, never a path
            connection.reply({"ok": False, "reason": "start_failed", "message": str(exc)})
            return
        except Exception:
            connection.reply({"ok": False, "reason": "start_failed"})
            return
        connection.reply({"ok": True, "pid": os.getpid()})
        writer = connection.sock.makefile("wb")
        try:
            with callers_database(env):  # the session's tools run in worker threads that inherit it
                await run_session(StormbufferServer(session, grant, self.shared.worker), (connection.reader, writer))
            writer.flush()
            connection.sock.sendall(SESSION_END)
        finally:
            writer.close()

    async def _invoke(self, connection: Connection, message: Mapping[str, Any]) -> None:
        from stormbuffer.protocol.invoke import MAX_INPUT_BYTES, encode, failure, invoke_line

        operation = str(message.get("operation"))
        length = payload_length(message, MAX_INPUT_BYTES + 1)
        if length is None:
            connection.reply({"ok": False, "reason": "bad_length"})
            return
        connection.reply({"ok": True, "pid": os.getpid()})
        data = await connection.read(length, timeout=PAYLOAD_TIMEOUT_S)
        if data is None:
            return
        env = dict(message.get("env", {}))

        def answer() -> dict[str, Any]:
            try:
                session = self.shared.session(str(message.get("view")), str(message.get("cwd")), env, acquire=False)
            except Exception:
                line = encode(failure(operation, "internal_error", "could not resolve the selected store"))
                return {"line": line, "ok": False, "problems": []}
            with callers_database(env):
                answered = invoke_line(operation, data, session, validate=env.get(VALIDATE_ENV) == "1")
            return {"line": answered.line, "ok": answered.ok, "problems": answered.problems}

        result = await anyio.to_thread.run_sync(answer, limiter=self.shared.worker)
        connection.reply(result)

    async def _human(self, connection: Connection, message: Mapping[str, Any]) -> None:
        """One human command of `sbuf` (`human.OPERATIONS`): its payload follows the hello."""
        from .human import OPERATIONS, answer

        operation = str(message.get("operation"))
        if operation not in OPERATIONS:
            connection.reply({"ok": False, "reason": "unknown_operation"})
            return
        length = payload_length(message, MAX_HUMAN_PAYLOAD)
        if length is None:
            connection.reply({"ok": False, "reason": "bad_length"})
            return
        connection.reply({"ok": True, "pid": os.getpid()})
        payload = await connection.read(length, timeout=PAYLOAD_TIMEOUT_S)
        if payload is None:
            return

        def run() -> dict[str, Any]:
            env = dict(message.get("env", {}))
            try:
                session = self.shared.session(str(message.get("view")), str(message.get("cwd")), env, acquire=False)
            except Exception:
                return {"ok": False, "failure": "error", "message": "could not resolve store"}
            with callers_database(env):
                return answer(session, operation, payload)

        connection.reply(await anyio.to_thread.run_sync(run, limiter=self.shared.worker))


@contextlib.contextmanager
def callers_database(env: Mapping[str, str]) -> Iterator[None]:
    """A PostgreSQL store's database named by the caller's environment, not the daemon's."""
    from stormbuffer.engines.postgresql.database import environment

    with environment(env):
        yield


def _import(module: str) -> None:
    import importlib

    try:
        importlib.import_module(module)
    except Exception as exc:  # only a head start is lost; the door that needs it reports it
        logger.warning("warm-up import failed: %s", type(exc).__name__)


def _rss_kib() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _open_files() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def main() -> None:
    """`python -m stormbuffer.daemon`: serve until idle, stopped, or replaced; exit 0 when another
    daemon already serves this runtime directory."""
    from stormbuffer.adapters.mcp.sdk import defer_package_inits
    from stormbuffer.threads import limit_math_threads

    limit_math_threads()
    defer_package_inits()  # before the first import of the SDK
    if os.fstat(2).st_size > MAX_LOG_BYTES:  # stderr is the log in the runtime directory
        os.ftruncate(2, 0)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s stormbuffer-daemon[%(process)d]: %(message)s")
    logger.setLevel(logging.INFO)
    place = runtime(os.environ, create=True)
    if place is None:
        logger.error("no private runtime directory")
        sys.exit(1)
    daemon = Daemon(place, os.environ)
    if not daemon.claim():
        sys.exit(0)
    logger.info("serving %s (version %s)", place.socket, __version__)
    anyio.run(daemon.serve)
    logger.info("exited after serving %d connections", daemon.served)

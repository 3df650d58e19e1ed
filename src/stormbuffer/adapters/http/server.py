"""Running the app with uvicorn on a loopback socket until SIGINT or SIGTERM.

The socket is bound here (so a bind failure is one clear line and port 0 picks a free port), and
the listening address is logged once it accepts connections. Under TLS, the handshake must end
within the header timeout. A signal stops accepting; requests in flight finish (within `GRACE_S`),
then the process exits 0. A worker of several (`workers`) takes the connections its main process
hands it on a channel instead of listening itself, marks its answers with its index, stops on
SIGTERM only (its main process handles SIGINT) and stops when its main process is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import os
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn

from .connections import HEADER_TIMEOUT_S

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

    from .access import Credentials
    from .context import StoreContext
    from .team import TeamSettings

GRACE_S = 10.0
BACKLOG = 2048
SIGNALS = {
    signal.SIGINT: "received interrupt signal; shutting down local API",
    signal.SIGTERM: "received termination signal; shutting down local API",
}
WORKER_HEADER = "Stormbuffer-Worker"
logger = logging.getLogger("stormbuffer.http")


def is_loopback(address: str) -> bool:
    """Whether `address` is an IP literal in 127.0.0.0/8 or ::1."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def bind(address: str, port: int) -> socket.socket:
    """A listening TCP socket on `address:port`; OSError when it cannot be bound.

    The protocol is named (`IPPROTO_TCP`, not 0): asyncio turns Nagle's algorithm off only on
    connections of such a socket, and with it on, a response written in two parts waits for the
    client's delayed acknowledgement (40 ms on Linux) on every reused connection.
    """
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((address, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def display_address(host: str, port: int) -> str:
    """`127.0.0.1:7342`, `[::1]:7342`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def loopback_server(
    store: StoreContext,
    sock: socket.socket,
    credentials: Credentials,
    extra_routes: Sequence[BaseRoute] = (),
    tls: tuple[str, str] | None = None,
    proxy: str | None = None,
    team: TeamSettings | None = None,
    worker: int | None = None,
    channel: socket.socket | None = None,
) -> LoopbackServer:
    """The server of the app for `store` on the bound socket, for holders of `credentials`, over TLS
    with `tls` (certificate and key files), behind the reverse proxy at `proxy`, a team server run
    as `team` says (`run(sockets=[sock])` serves it until a shutdown signal; setting `should_exit`
    stops it too); as worker `worker` of several taking its connections on `channel`, when given
    (`workers.serve_forked`)."""
    from .app import build_app
    from .connections import BoundedH11Protocol, accept_batch

    app = build_app(store, sock.getsockname()[0], credentials, extra_routes, proxy, team)
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on", server_header=False,
                            timeout_graceful_shutdown=int(GRACE_S), proxy_headers=False,
                            http=BoundedH11Protocol, ws="none", backlog=accept_batch(),
                            headers=[] if worker is None else [(WORKER_HEADER, str(worker))],
                            ssl_certfile=tls[0] if tls else None, ssl_keyfile=tls[1] if tls else None)  # fmt: skip
    return LoopbackServer(config, display_address(*sock.getsockname()[:2]), store, worker, channel)


class LoopbackServer(uvicorn.Server):
    """uvicorn's server, logging its address once it accepts connections (then warming the store up
    on a reader thread) and which signal stopped it. It does not re-raise the signal after shutting
    down (uvicorn does, which would end the process by that signal instead of with status 0)."""

    def __init__(self, config: uvicorn.Config, address: str, store: StoreContext, worker: int | None = None,
                 channel: socket.socket | None = None) -> None:  # fmt: skip
        super().__init__(config)
        self.address = address
        self.store = store
        self.worker = worker
        self.channel = channel
        self.parent = os.getppid()
        self.warming: asyncio.Future[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if self.channel is not None:  # a worker: its main process accepts the connections
            for sock in sockets or []:
                sock.close()
            await super().startup([])
            if self.started:
                self._take_connections(self.channel)
        elif self.config.ssl is None:
            await super().startup(sockets)
        else:  # uvicorn leaves asyncio's 60 s for a TLS handshake, uncounted by the connection cap
            loop = asyncio.get_running_loop()
            limited = functools.partial(loop.create_server, ssl_handshake_timeout=HEADER_TIMEOUT_S)
            loop.create_server = limited  # type: ignore[method-assign]
            try:
                await super().startup(sockets)
            finally:
                del loop.create_server  # the loop's own method again
        if self.started:
            if self.worker is not None:
                logger.info("team server worker %d listening pid=%d", self.worker, os.getpid())
            if self.worker in (None, 1):
                logger.info("Stormbuffer local API listening address=%s", self.address)
            self.warming = asyncio.ensure_future(self.store.read(self.store.warm_up))

    def _take_connections(self, channel: socket.socket) -> None:
        """Serve each connection the main process sends on `channel` as if accepted here."""
        loop = asyncio.get_running_loop()
        config, state = self.config, self.lifespan.state
        protocol: Callable[[], asyncio.Protocol] = functools.partial(
            config.http_protocol_class,  # type: ignore[call-arg]
            config=config,
            server_state=self.server_state,
            app_state=state,
        )  # uvicorn's own factory (`Server.startup`)
        handshake = HEADER_TIMEOUT_S if config.ssl else None
        channel.setblocking(False)

        async def serve(sock: socket.socket) -> None:
            try:
                await loop.connect_accepted_socket(protocol, sock, ssl=config.ssl, ssl_handshake_timeout=handshake)
            except (OSError, ssl.SSLError, TimeoutError):  # gone, or a failed handshake: nothing to answer
                sock.close()

        def take() -> None:
            while True:
                try:
                    _data, descriptors, _flags, _address = socket.recv_fds(channel, 64, 64)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:
                    descriptors, _data = [], b""
                if not descriptors and not _data:  # the main process is gone
                    loop.remove_reader(channel.fileno())
                    return
                for descriptor in descriptors:
                    self.server_state.tasks.add(task := loop.create_task(serve(socket.socket(fileno=descriptor))))
                    task.add_done_callback(self.server_state.tasks.discard)

        loop.add_reader(channel.fileno(), take)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.channel is not None:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(self.channel.fileno())
            self.channel.close()
        await super().shutdown(sockets)

    async def on_tick(self, counter: int) -> bool:
        if self.worker is not None and not self.should_exit and os.getppid() != self.parent:
            logger.warning("team server worker %d stopping: its main process is gone", self.worker)
            self.should_exit = True
        return await super().on_tick(counter)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit and sig in SIGNALS:
            logger.info(SIGNALS[signal.Signals(sig)])
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
            yield
            return
        handled = [signal.SIGTERM] if self.worker is not None else list(SIGNALS)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class _Formatter(logging.Formatter):
    """`<RFC 3339 UTC time> <LEVEL> <message>`, without tracebacks."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"

    def formatException(self, ei: object) -> str:  # noqa: N802
        return ""

    def formatStack(self, stack_info: str) -> str:  # noqa: N802
        return ""


def log_to_stderr() -> None:
    """The server's log on stderr: its own lines at info level, uvicorn's warnings and errors only."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter("%(asctime)s %(levelname)5s %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
    logging.getLogger("stormbuffer.http").setLevel(logging.INFO)

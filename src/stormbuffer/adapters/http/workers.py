"""Several worker processes serving one listening socket (`sbuf serve --team --workers N`).

The main process binds the socket, opens what the workers share (`StoreContext.prepare`), then
forks the workers, each running the whole team server. It accepts every connection itself and hands
them to the workers in turn, over a Unix socket pair each (`Handoff`): a client keeps its connection,
so whichever worker accepted first would otherwise keep the clients that connect together. SIGINT
or SIGTERM makes it send SIGTERM to every worker, which finishes its requests in flight and exits;
it then exits 0. A worker that exits on its own is reported, the others are stopped and the server
exits 1 (a supervisor such as systemd may start it again). A worker whose main process is gone
stops by itself (`LoopbackServer.on_tick`), so nothing outlives the server.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from types import FrameType

from .server import SIGNALS

logger = logging.getLogger("stormbuffer.http")


ACCEPT_POLL_S = 0.25  # how often the accepting thread looks whether the server is stopping


def serve_forked(count: int, listener: socket.socket, serve: Callable[[int, socket.socket], None]) -> int:
    """Run `serve(index, channel)` in `count` forked workers (index 1 to `count`), each taking the
    connections to `listener` handed to it on `channel`, until they stop; the exit status."""
    children: dict[int, int] = {}  # pid → index
    stopping = False
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(count)]
    handoff = Handoff(listener, [ours for ours, _theirs in pairs])

    def stop_all() -> None:
        handoff.stop()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def on_signal(sig: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            logger.info(SIGNALS[signal.Signals(sig)])
        stopping = True
        stop_all()

    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()  # the collector leaves what exists now alone: its pages stay shared with the workers
    previous = {sig: signal.signal(sig, on_signal) for sig in SIGNALS}
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # no signal between a fork and its pid being known
    try:
        for index in range(1, count + 1):
            pid = os.fork()
            if pid == 0:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process stops the workers
                signal.signal(signal.SIGTERM, previous[signal.SIGTERM])
                signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
                channel = pairs[index - 1][1]
                for ours, theirs in pairs:
                    ours.close()
                    if theirs is not channel:
                        theirs.close()
                os._exit(_worker(serve, index, channel))
            children[pid] = index
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    for _ours, theirs in pairs:
        theirs.close()
    accepting = threading.Thread(target=handoff.run, name="stormbuffer-accept", daemon=True)
    accepting.start()
    failed = False
    try:
        while children:
            pid, status = os.wait()
            index = children.pop(pid, 0)
            code = os.waitstatus_to_exitcode(status)
            if index and (code != 0 or not stopping):
                logger.error("team server worker %d (pid %d) exited with status %d; stopping the server",
                             index, pid, code)  # fmt: skip
                failed, stopping = True, True
                stop_all()
    finally:
        handoff.stop()
        accepting.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 1 if failed else 0


class Handoff:
    """The main process's accepting loop: each connection to `listener` goes to the next worker's
    channel in turn (its descriptor sent with one byte); a worker whose channel is full or closed
    is passed over, and when none takes it, the connection is closed."""

    def __init__(self, listener: socket.socket, channels: list[socket.socket]) -> None:
        self.listener = listener
        self.channels = channels
        self.next = 0
        self._stopping = threading.Event()
        for channel in channels:
            channel.setblocking(False)
        listener.settimeout(ACCEPT_POLL_S)

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                connection, _address = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:  # out of descriptors, or a connection reset while queued: the next one
                self._stopping.wait(ACCEPT_POLL_S / 10)
                continue
            with connection:
                self.hand(connection)
        self.listener.close()
        for channel in self.channels:
            channel.close()

    def hand(self, connection: socket.socket) -> None:
        """Send `connection` to the next worker that takes it."""
        for _ in range(len(self.channels)):
            channel = self.channels[self.next]
            self.next = (self.next + 1) % len(self.channels)
            try:
                socket.send_fds(channel, [b"c"], [connection.fileno()])
                return
            except OSError:  # full (that worker is behind) or closed (it is gone)
                continue

    def stop(self) -> None:
        """Stop accepting; the loop closes the listener and the channels within `ACCEPT_POLL_S`."""
        self._stopping.set()


def _worker(serve: Callable[[int, socket.socket], None], index: int, channel: socket.socket) -> int:
    """The exit status of worker `index` running `serve` on its `channel`."""
    try:
        serve(index, channel)
        status = 0
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # a worker's failure is reported, never its traceback
        logger.error("team server worker %d failed: %s", index, type(exc).__name__)
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return status

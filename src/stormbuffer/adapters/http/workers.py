"""Several worker processes serving one listening socket (`sbuf serve --team --workers N`).

The main process binds the socket, then forks the workers, each inheriting it and running the whole
team server; the kernel hands each new connection to one of them. The main process serves nothing:
it waits. SIGINT or SIGTERM makes it send SIGTERM to every worker, which finishes its requests in
flight and exits; it then exits 0. A worker that exits on its own is reported, the others are
stopped and the server exits 1 (a supervisor such as systemd may start it again). A worker whose
main process is gone stops by itself (`LoopbackServer.on_tick`), so nothing outlives the server.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType

from .server import SIGNALS

logger = logging.getLogger("stormbuffer.http")


def serve_forked(count: int, serve: Callable[[int], None]) -> int:
    """Run `serve(index)` in `count` forked workers (index 1 to `count`) until they stop; the exit status."""
    children: dict[int, int] = {}  # pid → index
    stopping = False

    def stop_all() -> None:
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
    previous = {sig: signal.signal(sig, on_signal) for sig in SIGNALS}
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # no signal between a fork and its pid being known
    try:
        for index in range(1, count + 1):
            pid = os.fork()
            if pid == 0:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process stops the workers
                signal.signal(signal.SIGTERM, previous[signal.SIGTERM])
                signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
                os._exit(_worker(serve, index))
            children[pid] = index
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
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
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 1 if failed else 0


def _worker(serve: Callable[[int], None], index: int) -> int:
    """The exit status of worker `index` running `serve`."""
    try:
        serve(index)
        status = 0
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # a worker's failure is reported, never its traceback
        logger.error("team server worker %d failed: %s", index, type(exc).__name__)
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return status

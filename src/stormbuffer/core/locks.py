"""Cross-process file locks (flock): taken at once, or waited for up to a bound, never for ever.

A waiter blocks in the kernel, in a helper thread, so the kernel's queue of blocked waiters decides
who goes next (every waiter is woken when the lock is released and the first to run takes it:
roughly in order, and nobody waits behind a stream of newcomers that keep polling). When the bound
runs out the caller gets `LockBusy`; the helper thread, still queued, drops the lock at once if it
gets it later. A waiter that dies leaves nothing behind: the kernel forgets its place in the queue.
"""

from __future__ import annotations

import fcntl
import math
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from .dirs import PRIVATE_FILE_MODE, make_private

LOCK_WAIT_ENV = "STORMBUFFER_LOCK_WAIT"
DEFAULT_LOCK_WAIT_S = 5.0
MAX_LOCK_WAIT_S = 3600.0


class LockBusy(Exception):
    """Someone else held the lock for as long as the caller would wait."""


def lock_wait_from(env: Mapping[str, str], given: float | None = None) -> float:
    """The bound on waiting for a store's mutation lock: `given` (a command-line flag), else
    `STORMBUFFER_LOCK_WAIT` in seconds, else the default. A value that is not a non-negative number
    falls back to the default; very large values are capped."""
    if given is None:
        try:
            given = float(env.get(LOCK_WAIT_ENV, DEFAULT_LOCK_WAIT_S))
        except ValueError:
            given = DEFAULT_LOCK_WAIT_S
    if not math.isfinite(given) or given < 0:
        return DEFAULT_LOCK_WAIT_S
    return min(given, MAX_LOCK_WAIT_S)


@contextmanager
def exclusive_lock(path: Path, *, wait: float = 0.0) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing); wait up to `wait` seconds for it."""
    make_private(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if wait <= 0:
            os.close(fd)
            raise LockBusy(path.name) from None
        if not _wait_for(fd, wait):
            raise LockBusy(path.name) from None
    except BaseException:
        os.close(fd)
        raise
    try:
        yield
    finally:
        os.close(fd)


def _wait_for(fd: int, wait: float) -> bool:
    """Block on the lock of `fd` for at most `wait` seconds. True: the lock is held and `fd` stays the
    caller's. False: `fd` is no longer the caller's (closed here, or later by the waiting thread, which
    drops the lock at once should it still get it)."""
    done = threading.Event()
    guard = threading.Lock()
    state = {"abandoned": False, "held": False}

    def block() -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = True
        except OSError:
            held = False
        with guard:
            if state["abandoned"]:
                os.close(fd)
                return
            state["held"] = held
            done.set()

    threading.Thread(target=block, name="stormbuffer-lock-wait", daemon=True).start()
    done.wait(wait)
    with guard:
        if done.is_set():
            if state["held"]:
                return True
            os.close(fd)
            return False
        state["abandoned"] = True
        return False

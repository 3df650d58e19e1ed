"""Keeping a team server worker's memory near what it uses (`sbuf serve --team --workers N`).

A worker that takes writes churns through memory it frees again: SQLite's page caches (a writer's
may take 64 MiB while a write or a sync reads the projection), the buffers of embedding passes and
of new vector matrices. glibc keeps what is freed in its arenas, where the next allocation may reuse
it, and gives back only the top of each heap; scattered among live objects, it stays resident and
private to the worker. Two bounds keep it down (measured in docs/team.md, "Memory of several workers"):

- SQLite's memory is held under `SQLITE_SOFT_LIMIT` for the whole process (`PRAGMA soft_heap_limit`):
  past it, a connection's page cache reuses its own pages instead of growing, so no large write or
  full check leaves 64 MiB of freed cache pages behind;
- a thread (`Trimmer`) watches the worker's resident size and, once it has grown `TRIM_GROWTH` above
  the lowest seen since its last look, asks glibc to give back its free pages (`malloc_trim`). It
  runs beside the requests, never on the event loop. Without glibc it does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger("stormbuffer.http")

SQLITE_SOFT_LIMIT = 16 << 20  # bytes of SQLite memory (page caches above all) in one worker
TRIM_GROWTH = 32 << 20  # bytes the resident size grows before freed heap pages are given back
TRIM_POLL_S = 1.0  # how often the trimming thread looks at the resident size
# glibc's thresholds, fixed (left alone, each large block freed raises them up to 32 and 64 MiB):
MMAP_THRESHOLD = 4 << 20  # blocks from this size up get a mapping of their own, unmapped when freed
TRIM_THRESHOLD = 8 << 20  # free memory at the top of a heap beyond this goes back when a block is freed
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)


def bound_memory() -> None:
    """In a worker process, once: the SQLite limit set, malloc's thresholds fixed and the trimming
    thread started."""
    limit_sqlite(SQLITE_SOFT_LIMIT)
    libc = _glibc()
    if libc is None:
        return
    libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    release = libc.malloc_trim
    threading.Thread(target=Trimmer(lambda: release(0)).run, name="stormbuffer-trim", daemon=True).start()


def limit_sqlite(limit: int) -> None:
    """Hold the SQLite memory of this process under `limit` bytes (a soft limit: no allocation fails)."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        conn.execute(f"PRAGMA soft_heap_limit = {int(limit)}")


def _glibc() -> ctypes.CDLL | None:
    """The C library with glibc's `mallopt` and `malloc_trim` declared; None under another C library."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (AttributeError, OSError):
        return None
    return libc


def resident_bytes() -> int:
    """This process's resident set size, from /proc (0 where there is none)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


class Trimmer:
    """Gives freed heap pages back each time the resident size has grown `growth` bytes above the
    lowest it was since the last release, looking every `poll_s` seconds until `stopping` is set."""

    def __init__(self, release: Callable[[], None], growth: int = TRIM_GROWTH, poll_s: float = TRIM_POLL_S,
                 resident: Callable[[], int] = resident_bytes) -> None:  # fmt: skip
        self.release = release
        self.growth = growth
        self.poll_s = poll_s
        self.resident = resident
        self.stopping = threading.Event()

    def run(self) -> None:
        low = self.resident()
        while not self.stopping.wait(self.poll_s):
            now = self.resident()
            if now - low < self.growth:
                low = min(low, now)
                continue
            self.release()
            low = self.resident()

"""Keeping a team server process's memory near what it uses (`sbuf serve --team`: its one process,
or each worker of `--workers N`; "worker" below).

A worker that takes writes churns through memory it frees again: SQLite's page caches (a writer's
may take 64 MiB while a write or a sync reads the projection), the buffers of embedding passes and
of new vector matrices. glibc keeps what is freed in its arenas, where the next allocation may reuse
it, and gives back only the top of each heap; scattered among live objects, it stays resident and
private to the worker. Four bounds keep it down (measured in docs/team.md, "Memory of several workers"):

- SQLite's memory is held under `SQLITE_SOFT_LIMIT` for the whole process (`PRAGMA soft_heap_limit`):
  past it, a connection's page cache reuses its own pages instead of growing, so no large write or
  full check leaves 64 MiB of freed cache pages behind;
- every write runs on the one writer thread (`embedding.writer_thread`), and in a worker of several
  so does every document embedding, so that their large blocks come from one arena, reused write after
  write (in one process the embeddings stay on the asking thread: there the writer thread saved no
  memory and made writes queue behind the reads' embedding batches);
- the other threads (requests, query embeddings) share at most `ARENA_MAX` arenas (glibc's
  `M_ARENA_MAX`; by default one per thread up to 8 per core), so that what one frees another reuses
  instead of each keeping its own;
- a thread (`Trimmer`) watches the worker's resident size and, once it has grown `TRIM_GROWTH` above
  the lowest seen since its last look, asks glibc to give back its free pages (`malloc_trim`, a few
  ms). It runs beside the requests, never on the event loop. Without glibc it does nothing.
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
ARENA_MAX = 2  # malloc arenas in one worker: the main thread's and one shared by the others
M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)
TRIM_GROWTH = 8 << 20  # bytes the resident size grows before freed heap pages are given back
TRIM_POLL_S = 1.0  # how often the trimming thread looks at the resident size


def bound_memory() -> None:
    """In a team server process (its one process or each worker), once, before it starts a thread:
    the SQLite limit and the arenas' bound set, the trimming thread started; the bounds in force logged
    (`team server memory bounds pid=… sqlite_soft_heap=16777216 malloc_arenas=2 trim=on model_arena=off
    model_threads=1 document_embeddings=writer` in a worker of several)."""
    from stormbuffer.embedding.sessions import described

    limit_sqlite(SQLITE_SOFT_LIMIT)
    arenas = limit_arenas(ARENA_MAX)
    release = heap_release()
    if release is not None:
        threading.Thread(target=Trimmer(release).run, name="stormbuffer-trim", daemon=True).start()
    logger.info("team server memory bounds pid=%d sqlite_soft_heap=%d malloc_arenas=%s trim=%s %s",
                os.getpid(), sqlite_limit(), ARENA_MAX if arenas else "default", "on" if release else "off",
                described())  # fmt: skip


def limit_sqlite(limit: int) -> None:
    """Hold the SQLite memory of this process under `limit` bytes (a soft limit: no allocation fails)."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        conn.execute(f"PRAGMA soft_heap_limit = {int(limit)}")


def sqlite_limit() -> int:
    """The SQLite soft heap limit of this process in bytes (0: none)."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        limit: int = conn.execute("PRAGMA soft_heap_limit").fetchone()[0]
    return limit


def limit_arenas(count: int) -> bool:
    """Have glibc make at most `count` malloc arenas in this process (`mallopt(M_ARENA_MAX)`): a thread
    started later shares one of them; False under another C library."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, count))


def heap_release() -> Callable[[], None] | None:
    """A call that gives the free pages of every malloc arena back to the system (glibc's
    `malloc_trim(0)`); None under another C library."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


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

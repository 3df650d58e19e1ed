"""One thread for a server's writes and, in a team server worker, for its document embeddings.

A write allocates large blocks and frees them again: the buffers of the model's passes over its
chunks (a few MB each), a new vector matrix's blocks, the record's parsing and its SQLite pages.
glibc keeps freed memory in the arena of the thread that allocated it, one arena per thread (up to
16 on two cores), each keeping the largest of what its thread freed, resident. Run on one long-lived
thread, every write's blocks come from its one arena, which reuses them write after write. The
server's writes are made one at a time anyway (`StoreContext.write`). A worker's embedder sends every
document embedding here too, wherever it is asked (`Embedder`); a query's embedding (one short text,
small buffers) stays on the thread that asks for it and never waits behind a write's.

`WRITER.run` starts the thread on first use in each process (a forked child has none of its parent's
threads and forgets its parent's); a call made on the thread itself runs at once. A call runs in
a copy of its caller's context, as anyio's threads run theirs (a daemon's caller environment, say).
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

THREAD_NAME = "stormbuffer-writer"


class WriterThread:
    """Runs calls one at a time, in the order given, on one thread of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._on_thread = threading.local()

    def run(self, function: Callable[..., T], *args: object) -> T:
        """`function(*args)` run on the writer thread in the caller's context; its result, or what it raised."""
        if getattr(self._on_thread, "yes", False):
            return function(*args)
        return self._executor().submit(contextvars.copy_context().run, function, *args).result()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, THREAD_NAME, initializer=self._mark)
            return self._pool

    def _mark(self) -> None:
        self._on_thread.yes = True

    def forget(self) -> None:
        """In a forked child: the parent's thread is not there; the next call starts this process's own."""
        self._lock = threading.Lock()
        self._pool = None


WRITER = WriterThread()  # the one writer thread of this process
os.register_at_fork(after_in_child=WRITER.forget)

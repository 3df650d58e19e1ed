"""One thread for the document embeddings of a team server worker (`sbuf serve --team --workers N`).

A write's chunks are embedded in batches whose buffers (the model's activations, a few MB each) are
freed again after every pass. glibc keeps freed memory in the arena of the thread that allocated it,
one arena per thread that ran a pass, up to 16; each keeps the largest pass it ran, free but
resident. Run on one long-lived thread, every write's passes come from the one arena, which reuses
the same buffers write after write. A query's embedding (one short text, small buffers) stays on the
thread that asks for it: it never waits behind a write's.

`DOCUMENTS.run` starts the thread on first use in each process (a forked child has none of its
parent's threads and forgets its parent's); a call made on the thread itself runs at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

THREAD_NAME = "stormbuffer-document-embedding"


class DocumentThread:
    """Runs calls one at a time, in the order given, on one thread of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._on_thread = threading.local()

    def run(self, function: Callable[..., T], *args: object) -> T:
        """`function(*args)` run on the document thread; its result, or what it raised."""
        if getattr(self._on_thread, "yes", False):
            return function(*args)
        return self._executor().submit(function, *args).result()

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


DOCUMENTS = DocumentThread()  # the one document thread of this process
os.register_at_fork(after_in_child=DOCUMENTS.forget)

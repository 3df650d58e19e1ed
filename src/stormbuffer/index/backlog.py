"""Embedding the texts that reads left without vectors, a small step at a time, on either engine
(`engines.projection.embed_waiting`).

A read embeds at most `READ_EMBED_LIMIT` texts before it answers from what exists (lexical
postings plus the vectors already there); whatever is left is the store's backlog. It is embedded
by `embed_backlog`, `STEP` texts at a time, each step holding the projection lock only for itself
and ending with a vector matrix that covers every text embedded so far: a reader or a writer that
arrives meanwhile waits at most one step. Who runs it: `sbuf sync` and `sbuf watch` in the
foreground, and a long-running process (the daemon, `sbuf serve`) in a `Backlog` thread per store,
which a read starts when its sync left texts pending. A PostgreSQL store's step is one transaction
that takes the rows it embeds with `FOR UPDATE SKIP LOCKED`: writers and readers never wait for it,
and the daemons of several hosts embed different rows; so its steps are larger (`DATABASE_STEP`),
enough texts for the embedder to keep both its workers busy.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..core.errors import IndexBusy, IndexUnavailable, StoreError
from ..core.stores import StorePaths
from ..engines.projection import database_variable, embed_waiting
from .sync import Embedder, Progress, SyncReport

STEP = 8  # texts embedded while the projection lock is held once
DATABASE_STEP = 256  # texts of a PostgreSQL store's step (its transaction locks only the rows it embeds)
BUSY_PAUSE_S = 0.2  # how long a backlog thread waits when another process holds the projection
STEP_PAUSE_S = 0.02  # between two steps of a backlog thread, so that reads and writes get the lock

logger = logging.getLogger(__name__)


def embed_backlog(
    paths: StorePaths,
    embedder: Embedder,
    *,
    progress: Progress | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> SyncReport:
    """Embed every text of the store's projection still without a vector, a step at a time, until
    none is left, the model fails or `stopping()`; returns the last step's report (its `pending`
    counts what is left, its `embedded` every step's texts). `progress("embedding", done, total,
    report)` after each step. Raises IndexBusy when another process holds a directory store's
    projection (what was embedded is kept)."""
    done, step = 0, STEP if database_variable(paths) is None else DATABASE_STEP
    while True:
        report = embed_waiting(paths, embedder, limit=step)
        done += report.embedded
        if progress is not None and (done or report.pending):
            progress("embedding", done, done + report.pending, report)
        if not report.pending or report.vector_failure == "embedding_execution_failed" or stopping():
            report.embedded = done
            return report


def catch_up(
    paths: StorePaths, embedder: Embedder | None, *, progress: Progress | None = None, limit: int | None = None
) -> SyncReport:
    """`sync_store` of a PostgreSQL store: its projection moves with every write, so only vectors can be
    behind; up to `limit` of the waiting texts (all without a limit) are embedded."""
    if embedder is None:
        return SyncReport()
    if limit is not None:
        return embed_waiting(paths, embedder, limit=limit)
    return embed_backlog(paths, embedder, progress=progress)


class Backlog:
    """One store's background embedding in a long-running process: a thread that `embed_backlog`s
    while texts are pending, started by `start` when none runs."""

    def __init__(self, paths: StorePaths) -> None:
        self.paths = paths
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def running(self) -> bool:
        with self._lock:
            return self._thread is not None and self._thread.is_alive()

    def start(self, embedder: Embedder) -> None:
        """Embed the store's backlog in the background (nothing when a thread is at it already)."""
        self.start_opening(lambda: (embedder, None))

    def start_opening(self, open_model: Callable[[], tuple[Embedder | None, str | None]]) -> None:
        """`start`, with the model opened by the thread (nothing to embed with when it is unavailable)."""
        with self._lock:
            if self._stop.is_set() or (self._thread is not None and self._thread.is_alive()):
                return
            self._thread = threading.Thread(
                target=self._run, args=(open_model,), name="stormbuffer-embedding-backlog", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        """Stop after the running step (what it embedded is kept)."""
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5.0)

    def _run(self, open_model: Callable[[], tuple[Embedder | None, str | None]]) -> None:
        embedder, _reason = open_model()
        while embedder is not None and not self._stop.is_set():
            try:
                embed_backlog(self.paths, embedder, stopping=self._pause)
                return
            except IndexBusy:
                self._stop.wait(BUSY_PAUSE_S)
            except (IndexUnavailable, StoreError) as exc:
                logger.warning("background embedding stopped: %s", type(exc).__name__)
                return

    def _pause(self) -> bool:
        """Between two steps: let a waiting reader or writer take the projection; stop when asked."""
        return self._stop.wait(STEP_PAUSE_S)

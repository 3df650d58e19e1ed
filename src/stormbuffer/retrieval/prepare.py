"""Readying stores for retrieval: the one call every door and process makes before a search.

`ready_for_retrieval` syncs the records of every store and brings its vectors up to date for the
model, in the order that suits the caller:

- a long-running process (a freshness registry given) opens the model and syncs only the stores
  that may have changed since their last sync; a store with more than `READ_EMBED_LIMIT` texts to
  embed gets none embedded and its backlog thread embeds them (`index/backlog.py`), whichever its
  engine (a PostgreSQL store is never synced: its projection moves with every write);
- any other process syncs the records first (a one-shot process may still be opening the model in
  a child meanwhile), then opens the model and refreshes only the vectors of the stores whose
  vectors are not current. With `bounded` (the default: a one-shot read must answer within an
  agent hook's timeout) it embeds at most `READ_EMBED_LIMIT` texts per store.

Either way a read never waits for a backlog: it answers from what exists, lexical postings plus
the vectors already there, and the search reports `vector_projection_incomplete`. The daemon,
`sbuf sync` and `sbuf watch` embed the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from ..core.errors import IndexBusy
from ..core.locks import DEFAULT_LOCK_WAIT_S
from ..core.stores import StorePaths
from ..engines.projection import database_variable, embed_waiting
from ..index import projection as pj
from ..index.sync import READ_EMBED_LIMIT, projection_lock, refresh_vectors, sync_store, vectors_current

if TYPE_CHECKING:
    from ..index.freshness import FreshnessRegistry
    from ..index.sync import Embedder, Progress, SyncReport

ModelOpener = Callable[[], tuple["Embedder | None", "str | None"]]  # the embedder, or None and the reason


@dataclass
class Readiness:
    """The embedder to search with (None: lexical only), the reason to report when semantic search
    cannot run, and the invalid record files found per store."""

    embedder: Embedder | None = None
    fallback: str | None = None
    invalid_files: list[tuple[StorePaths, str, str]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.invalid_files


def ready_for_retrieval(
    stores: list[StorePaths],
    open_model: ModelOpener | None,
    freshness: FreshnessRegistry | None = None,
    *,
    bounded: bool = True,
    progress: Progress | None = None,
    opened: Callable[[Embedder], None] | None = None,
    lock_wait: float = DEFAULT_LOCK_WAIT_S,
) -> Readiness:
    """Sync every store, and given `open_model` its vectors too (see the module's docstring);
    `opened` is given the embedder as soon as the model is open (a search starts its query's
    embedding there, so that it runs while the stores are readied).

    A store whose projection another writer holds is read as it is: the fallback becomes
    `vector_projection_busy` (reported only if its vectors turn out to be stale). A store with no
    readable projection yet (another process is making the first) has nothing to read: the read waits
    up to `lock_wait` seconds for that writer (as long as the caller's writes would), then readies it
    itself, and answers busy only past that. A failed vector refresh gives `embedding_execution_failed`.
    """
    if open_model is not None and opened is not None:
        open_model = _telling(open_model, opened)
    ready = Readiness()
    each = partial(_each, ready, wait=lock_wait)
    in_database = [paths for paths in stores if database_variable(paths) is not None]
    if in_database:  # their projection moves with every write: only vectors may be waiting
        stores = [paths for paths in stores if paths not in in_database]
        embedder, reason = open_model() if open_model is not None else (None, None)
        if embedder is not None:
            model, limit = embedder, READ_EMBED_LIMIT if bounded else None
            if freshness is not None:
                each(in_database, lambda paths: _embed_deferred(paths, model, freshness))
            else:
                each(in_database, lambda paths: embed_waiting(paths, model, limit=limit))
        if not stores:
            ready.embedder, ready.fallback = embedder, ready.fallback or reason
            return ready
        open_model = (lambda: (embedder, reason)) if open_model is not None else None
    if open_model is None:
        each(stores, lambda paths: _sync(paths, None, freshness, progress))
        return ready
    if freshness is not None:
        ready.embedder, reason = open_model()
        each(stores, lambda paths: freshness.sync(paths, ready.embedder))
        ready.fallback = ready.fallback or reason
        return ready
    each(stores, lambda paths: sync_store(paths, None, progress=progress))
    ready.embedder, reason = open_model()
    if ready.embedder is not None:
        embedder = ready.embedder
        limit = READ_EMBED_LIMIT if bounded else None
        stale = [paths for paths in stores if not vectors_current(paths, embedder)]
        each(stale, lambda paths: refresh_vectors(paths, embedder, limit=limit, progress=progress))
    ready.fallback = ready.fallback or reason
    return ready


def _telling(open_model: ModelOpener, opened: Callable[[Embedder], None]) -> ModelOpener:
    """`open_model`, handing the embedder it opens to `opened` before returning it."""

    def opening() -> tuple[Embedder | None, str | None]:
        embedder, reason = open_model()
        if embedder is not None:
            opened(embedder)
        return embedder, reason

    return opening


def _embed_deferred(paths: StorePaths, embedder: Embedder, freshness: FreshnessRegistry) -> None:
    """A long-running process's read of a PostgreSQL store: nothing is sent now. The read's opening learns
    whether vectors wait (`check_vectors`), and only when some do are up to `READ_EMBED_LIMIT` embedded
    before the read opens again (`_embed_waiting`), so a store with nothing waiting costs no round trip."""
    from ..engines.postgresql.projection import VectorCheck, check_vectors
    from ..index import projection as pj

    check_vectors(paths, VectorCheck(pj.model_identity(embedder), partial(_embed_waiting, paths, embedder, freshness)))


def _embed_waiting(paths: StorePaths, embedder: Embedder, freshness: FreshnessRegistry) -> SyncReport:
    """Embed up to `READ_EMBED_LIMIT` waiting texts of a PostgreSQL store now; more are all left to the
    store's backlog thread, started here."""
    from ..engines.postgresql.projecting import embed_store

    report = embed_store(paths, embedder, limit=READ_EMBED_LIMIT, defer=True)
    if report.pending:
        freshness.backlog(paths).start(embedder)
    return report


def _sync(
    paths: StorePaths, embedder: Embedder | None, freshness: FreshnessRegistry | None, progress: Progress | None
) -> SyncReport | None:
    return freshness.sync(paths, embedder) if freshness is not None else sync_store(paths, embedder, progress=progress)


def _after_the_writer(
    paths: StorePaths, step: Callable[[StorePaths], SyncReport | None], wait: float
) -> SyncReport | None:
    """`step` again once the writer that holds the store's projection lets it go, waiting up to `wait`
    seconds; IndexBusy when it keeps the lock longer."""
    with projection_lock(paths, wait=wait):
        pass
    return step(paths)


def _each(
    ready: Readiness, stores: list[StorePaths], step: Callable[[StorePaths], SyncReport | None], wait: float
) -> None:
    """Run `step` on every store, noting invalid files and the first fallback reason; `wait`: how long
    to wait for a writer making a store's first projection."""
    for paths in stores:
        try:
            report = step(paths)
        except IndexBusy:
            if pj.stored_settings(paths) is not None:  # there is a projection to read as it is
                ready.fallback = "vector_projection_busy"
                continue
            report = _after_the_writer(paths, step, wait)
        if report is None:  # known to be current
            continue
        ready.invalid_files.extend((paths, name, message) for name, message in report.invalid_files)
        if report.vector_failure and ready.fallback is None:
            ready.fallback = report.vector_failure

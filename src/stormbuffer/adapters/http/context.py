"""What every route works with: the selected store, the protocol session and the worker limits.

Core work never runs on the event loop. Reads run on a few worker threads at once; writes run one
at a time in this process (the core's mutation lock still arbitrates between processes), and a
write that waited `WRITE_WAIT_S` for its turn is answered as busy instead of queueing forever.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import anyio
import anyio.to_thread
from starlette.requests import Request

from stormbuffer.core.errors import MutationBusy
from stormbuffer.core.repository import Repository
from stormbuffer.core.stores import PlatformDirs, StorePaths, View, record_scope, resolve_store, retrieval_stores
from stormbuffer.embedding.writer_thread import WRITER
from stormbuffer.protocol.session import Session

if TYPE_CHECKING:
    from stormbuffer.index.freshness import FreshnessRegistry
    from stormbuffer.index.sync import Embedder

T = TypeVar("T")
logger = logging.getLogger("stormbuffer.http")
READ_THREADS = 4
WRITE_WAIT_S = 10.0


class LocalModel:
    """The embedder slot of the server: the model `sbuf init` prepared, opened on first use and kept.

    It never acquires or builds a model. Without one, retrieval is lexical and says why
    (`model_unavailable`, `embedder_initialization_failed`); the next read tries again.
    """

    def __init__(self, cache_dir: Path) -> None:
        self._cache_dir = cache_dir
        self._lock = threading.Lock()
        self._embedder: Embedder | None = None

    def get(self) -> tuple[Embedder | None, str | None]:
        from stormbuffer.embedding import open_embedder

        with self._lock:
            if self._embedder is not None:
                return self._embedder, None
            embedder, reason = open_embedder(self._cache_dir)
            self._embedder = embedder
            return embedder, reason


@dataclass
class StoreContext:
    """The store a server serves, resolved once at startup, and how its routes run core work."""

    session: Session
    scope: str  # the selected store's record scope, read at startup
    write_wait_s: float = WRITE_WAIT_S
    _reads: anyio.CapacityLimiter | None = field(default=None, repr=False)
    _writes: anyio.CapacityLimiter | None = field(default=None, repr=False)

    @classmethod
    def open(cls, view: View, cwd: Path, env: Mapping[str, str], freshness: FreshnessRegistry) -> StoreContext:
        """Resolve the view's store from `cwd` and the environment; NotInitialized when it has no `store.toml`."""
        dirs = PlatformDirs.from_environ(env)
        selected = resolve_store(view, cwd, dirs)
        scope = record_scope(selected)
        return cls(Session(view, selected, dirs, LocalModel(dirs.shared_cache), freshness), scope)

    @property
    def view(self) -> View:
        return self.session.view

    @property
    def selected(self) -> StorePaths:
        return self.session.selected

    def repository(self) -> Repository:
        return self.session.repository()

    def prepare(self, workers: int) -> None:
        """Before a team server of `workers` processes serves: its model to be opened with the team
        server's bounds (`sessions.for_team_server`). With several workers, before they fork, also
        import what a request needs and open the model, so that every worker shares those pages
        instead of loading its own copy. It starts no thread: a forked child would lack it."""
        from stormbuffer.embedding.sessions import for_team_server

        for_team_server(forking=workers > 1)
        if workers > 1:
            import stormbuffer.retrieval  # noqa: F401

            self.session.embedder.get()

    def warm_up(self) -> None:
        """What the first read would do first: import the retrieval layer and sync the view's stores,
        which starts their watchers (run once the server listens; a failure is left to that read)."""
        from stormbuffer.protocol.reads import prepare_retrieval

        try:
            import stormbuffer.retrieval  # noqa: F401

            prepare_retrieval(
                self.session, retrieval_stores(self.view, self.selected, self.session.dirs), records_only=True
            )
        except Exception as exc:
            logger.debug("warm-up failed: %s", type(exc).__name__)

    async def read(self, function: Callable[..., T], *args: object) -> T:
        """Run `function(*args)` on a worker thread."""
        if self._reads is None:
            self._reads = anyio.CapacityLimiter(READ_THREADS)
        return await anyio.to_thread.run_sync(function, *args, limiter=self._reads)

    async def write(self, function: Callable[..., T], *args: object) -> T:
        """Run `function(*args)` on the writer thread (`embedding.writer_thread`: one arena for every
        write's large blocks), after the writes before it; MutationBusy when its turn did not come
        within `write_wait_s`. The store is marked changed for later reads."""
        if self._writes is None:
            self._writes = anyio.CapacityLimiter(1)
        with anyio.move_on_after(self.write_wait_s) as waiting:
            await self._writes.acquire()
        if waiting.cancelled_caught:
            raise MutationBusy()
        try:
            return await anyio.to_thread.run_sync(WRITER.run, function, *args)
        finally:
            self._writes.release()
            if self.session.freshness is not None:
                self.session.freshness.changed(self.selected)


def store_context(request: Request) -> StoreContext:
    """The store the app serves, for any route (also the extra routes mounted into it)."""
    store: StoreContext = request.app.state.store
    return store

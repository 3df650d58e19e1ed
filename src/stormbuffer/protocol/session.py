"""What one caller of the protocol works with: a view, its selected store, an embedder slot and,
in a long-running process, the freshness registry that lets reads skip the full sync check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from stormbuffer.core.locks import DEFAULT_LOCK_WAIT_S
from stormbuffer.core.repository import Repository
from stormbuffer.core.stores import PlatformDirs, StorePaths, View

if TYPE_CHECKING:
    from stormbuffer.index.freshness import FreshnessRegistry
    from stormbuffer.index.sync import Embedder


class EmbedderSlot(Protocol):
    def get(self) -> tuple[Embedder | None, str | None]:
        """The embedder, or None and the semantic fallback reason."""
        ...


@dataclass
class Session:
    view: View
    selected: StorePaths
    dirs: PlatformDirs
    embedder: EmbedderSlot
    freshness: FreshnessRegistry | None = None  # None: every read checks every record file
    lock_wait: float = DEFAULT_LOCK_WAIT_S  # seconds a write waits for a busy store

    def repository(self) -> Repository:
        """The selected store's repository, waiting for a busy store as configured; its writes check
        the store through the watcher, when this process keeps one."""
        freshness = self.freshness.store(self.selected) if self.freshness is not None else None
        return Repository(self.selected, lock_wait=self.lock_wait, freshness=freshness)

    def written(self) -> None:
        """A write went through this session. In a long-running process reads see it at once, and a
        PostgreSQL store's backlog thread embeds the chunks it left waiting for vectors (a directory
        store's next read starts its own, as that read syncs the projection)."""
        from stormbuffer.engines.projection import database_variable

        if self.freshness is None:
            return
        self.freshness.changed(self.selected)
        if database_variable(self.selected) is not None:
            self.freshness.backlog(self.selected).start_opening(self.embedder.get)


class NoEmbedder:
    """A slot without a model: retrieval stays lexical and says why."""

    def __init__(self, reason: str = "intentionally_unavailable") -> None:
        self.reason = reason

    def get(self) -> tuple[Embedder | None, str | None]:
        return None, self.reason

"""Getting stores and the model ready before a search: the steps every entry point shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.errors import IndexBusy
from ..core.stores import StorePaths
from ..index.sync import refresh_vectors, sync_store

if TYPE_CHECKING:
    from ..index.freshness import FreshnessRegistry
    from ..index.sync import Embedder


@dataclass
class Preparation:
    """Invalid record files found per store, and the reason to report if semantic search cannot run."""

    invalid_files: list[tuple[StorePaths, str, str]] = field(default_factory=list)
    fallback: str | None = None

    @property
    def complete(self) -> bool:
        return not self.invalid_files


def prepare_stores(
    stores: list[StorePaths],
    embedder: Embedder | None,
    freshness: FreshnessRegistry | None = None,
    *,
    vectors_only: bool = False,
) -> Preparation:
    """Sync every store (and its vectors, given an embedder); with `freshness` (a long-running
    process), only the stores that may have changed since their last sync; with `vectors_only` (this
    process has just synced the records without the model), only the vectors.

    A store whose projection another writer holds is read as it is: its fallback reason becomes
    `vector_projection_busy` (reported only if its vectors turn out to be stale). A failed vector
    refresh gives `embedding_execution_failed`.
    """
    prepared = Preparation()
    for paths in stores:
        try:
            if freshness is not None:
                report = freshness.sync(paths, embedder)
            elif vectors_only and embedder is not None:
                report = refresh_vectors(paths, embedder)
            else:
                report = sync_store(paths, embedder)
        except IndexBusy:
            prepared.fallback = "vector_projection_busy"
            continue
        if report is None:  # known to be current
            continue
        prepared.invalid_files.extend((paths, name, message) for name, message in report.invalid_files)
        if report.vector_failure and prepared.fallback is None:
            prepared.fallback = report.vector_failure
    return prepared

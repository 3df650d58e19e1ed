"""What retrieval reads from a store's projection, whichever engine keeps it.

A `Projection` is one consistent read view (a snapshot) of one store: the lexical postings that BM25
ranks, chunk texts with their records' fields, sentence vectors, and a `VectorSearch` over the chunk
vectors. Ranking (BM25, fusion, focus, context) is written once in `retrieval` and `index.postings`
and runs the same over every engine: the SQLite file of a directory store
(`engines.directory.projection`) and PostgreSQL (`engines.postgresql.projection`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from ..core.stores import StorePaths
    from ..index.postings import TermLookup
    from ..index.sync import Embedder, Progress, SyncReport
    from ..retrieval.hits import SearchOptions

# The fields of a chunk and its record that hits are made of, in this order.
ChunkRow = tuple[int, str, int, str, str, str, str, str, str, str, str, str, str]
CHUNK_COLUMNS = ("id", "record_id", "ordinal", "text", "title", "kind", "scope", "status", "access", "path",
                 "aliases", "sources", "created_at")  # fmt: skip


@dataclass(frozen=True)
class Nearest:
    """The nearest chunk of each of the nearest records, best first, with its cosine similarity."""

    chunks: list[int]
    similarities: list[float]


class VectorSearch(Protocol):
    """Exact (or indexed) cosine search over one projection's unit-length chunk vectors."""

    def nearest(self, query_vector: np.ndarray, options: SearchOptions, records: int) -> Nearest:
        """The nearest chunk of each of the `records` nearest records that pass the options' filters."""

    def similarities(self, query_vector: np.ndarray, chunks: Sequence[int]) -> tuple[list[int], list[float]]:
        """For those of the sorted `chunks` that have a vector: their ids and cosine similarities, in order."""


class Projection(Protocol):
    """One read snapshot of a store's projection."""

    @property
    def store_root(self) -> Path:
        """The store's directory (hits name their record files under it)."""

    @property
    def settings(self) -> Mapping[str, str]:
        """The projection's metadata (`index.projection` keys, the lexical statistics)."""

    @property
    def terms(self) -> TermLookup:
        """The postings, for `index.postings.rank`."""

    def chunk_rows(self, chunk_ids: Sequence[int], options: SearchOptions) -> Iterable[ChunkRow]:
        """The rows (`CHUNK_COLUMNS`) of those chunks whose record passes the options' filters."""

    def sentence_blobs(self, chunks: Iterable[int]) -> dict[int, bytes]:
        """Chunk id → its sentences' vectors (float32 rows, one blob), for those of `chunks` that have them."""

    def vector_search(self, embedder: Embedder) -> VectorSearch | None:
        """Search over vectors that cover this snapshot and were made by `embedder`'s model, else None."""


def reading(paths: StorePaths) -> AbstractContextManager[Projection]:
    """A read snapshot of the store's projection, from the engine its `store.toml` names; IndexUnavailable
    when a directory store has none (sync first), StoreError when a PostgreSQL store's database cannot
    be used."""
    from ..core.stores import read_config

    config = read_config(paths) if paths.is_initialized() else None
    if config is not None and config.database is not None:  # one reading of store.toml tells both
        from .postgresql.projection import reading_store

        return reading_store(paths, config.record_scope, config.database)
    from .directory.projection import reading as read_directory

    return read_directory(paths)


def embed_waiting(paths: StorePaths, embedder: Embedder, *, limit: int | None = None,
                  progress: Progress | None = None) -> SyncReport:  # fmt: skip
    """Embed up to `limit` of the texts of the store's projection still without a vector (all without a
    limit), from the engine its `store.toml` names; the report's `embedded` and `pending` count them.
    IndexBusy when another process holds a directory store's projection."""
    if database_variable(paths) is not None:
        from .postgresql.projecting import embed_store

        return embed_store(paths, embedder, limit=limit)
    from ..index.sync import refresh_vectors

    return refresh_vectors(paths, embedder, limit=limit, progress=progress)


def database_variable(paths: StorePaths) -> str | None:
    """The database of a PostgreSQL store (the environment variable naming it, or `EMBEDDED`); None for a
    directory store."""
    from ..core.stores import read_config

    return read_config(paths).database if paths.is_initialized() else None

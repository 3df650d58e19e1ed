"""The read side of a directory store's SQLite projection (`index.projection`), behind `engines.projection`.

Chunks, records and postings are read with the sqlite3 driver (a one-shot process answers without
importing SQLAlchemy); vectors are searched exactly with NumPy over the matrix files beside the
projection (`index.vectors`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...core.errors import IndexUnavailable
from ...index import projection as pj
from ...index import vectors
from ...index.postings import SqliteTerms
from ..projection import CHUNK_COLUMNS, ChunkRow, Nearest

if TYPE_CHECKING:
    import numpy as np

    from ...core.stores import StorePaths
    from ...index.sync import Embedder
    from ...retrieval.hits import SearchOptions

# Below this share of rows passing the filters, only those rows are multiplied.
_SUBSET_SHARE = 0.5
_COLUMNS = ", ".join(f"{'c' if name in ('id', 'record_id', 'ordinal', 'text') else 'r'}.{name}"
                     for name in CHUNK_COLUMNS)  # fmt: skip


@contextmanager
def reading(paths: StorePaths) -> Iterator[SqliteProjection]:
    """A read snapshot of the store's projection; IndexUnavailable when there is none (sync first)."""
    path = pj.existing_index_path(paths)
    if path is None:
        raise IndexUnavailable(pj.UNAVAILABLE_MESSAGE)
    with pj.reading(path) as conn:
        yield SqliteProjection(conn, paths.root, path, pj.get_settings(conn))


@dataclass(frozen=True)
class SqliteProjection:
    """A read transaction on one store's projection file, with the metadata read at its start."""

    conn: sqlite3.Connection
    store_root: Path
    index_path: Path
    settings: Mapping[str, str]

    @property
    def terms(self) -> SqliteTerms:
        return SqliteTerms(self.conn)

    def chunk_rows(self, chunk_ids: Sequence[int], options: SearchOptions) -> Iterable[ChunkRow]:
        filters: list[tuple[str, Sequence[object]]] = [
            ("c.id", chunk_ids), ("r.status", options.statuses), ("r.scope", options.scopes or ())
        ]  # fmt: skip
        if options.access is not None:
            filters.append(("r.access", options.access))
        if options.kinds is not None:
            filters.append(("r.kind", options.kinds))
        where = " AND ".join(f"{column} IN ({', '.join('?' * len(values))})" for column, values in filters)
        return self.conn.execute(  # type: ignore[no-any-return]
            f"SELECT {_COLUMNS} FROM chunks AS c JOIN records AS r ON r.id = c.record_id WHERE {where}",
            tuple(value for _column, values in filters for value in values),
        )

    def sentence_blobs(self, chunks: Iterable[int]) -> dict[int, bytes]:
        wanted = list(chunks)
        if not wanted:
            return {}
        return dict(self.conn.execute(
            "SELECT c.id, v.sentence_vectors FROM chunks AS c JOIN vectors AS v ON v.embed_hash = c.embed_hash "
            f"WHERE v.sentence_vectors IS NOT NULL AND c.id IN ({', '.join('?' * len(wanted))})", wanted
        ).fetchall())  # fmt: skip

    def vector_search(self, embedder: Embedder) -> MatrixSearch | None:
        """The store's vector matrix when it covers this snapshot of the projection with this model."""
        settings = self.settings
        if settings.get(pj.VECTOR_MODEL) != pj.model_identity(embedder):
            return None
        layout = vectors.Layout.current(settings)
        matrix = None if layout is None else vectors.load(self.index_path, layout)
        return None if matrix is None else MatrixSearch(matrix)


@dataclass(frozen=True)
class MatrixSearch:
    """Exact search over a mapped vector matrix; touches no SQLite, so it may run on another thread."""

    matrix: vectors.Matrix

    def nearest(self, query_vector: np.ndarray, options: SearchOptions, records: int) -> Nearest:
        import numpy as np

        matrix = self.matrix
        assert options.scopes is not None
        keep = matrix.rows_passing(options.statuses, options.scopes, options.access, options.kinds)
        if keep.size == 0 or records < 1:
            return Nearest([], [])
        every_row = keep.size == matrix.size
        if every_row:
            similarity, record_numbers = matrix.similarity(query_vector), matrix.rows["record"]
        elif keep.size < _SUBSET_SHARE * matrix.size:
            similarity, record_numbers = matrix.similarity(query_vector, keep), matrix.rows["record"][keep]
        else:
            similarity, record_numbers = matrix.similarity(query_vector)[keep], matrix.rows["record"][keep]
        rows = _best_rows(similarity, record_numbers, records)
        chosen = rows if every_row else keep[rows]
        return Nearest(np.asarray(matrix.rows["chunk"][chosen]).tolist(), similarity[rows].tolist())

    def similarities(self, query_vector: np.ndarray, chunks: Sequence[int]) -> tuple[list[int], list[float]]:
        import numpy as np

        matrix = self.matrix
        position, found = matrix.rows_of(np.fromiter(chunks, dtype=np.int64, count=len(chunks)))
        positions = position[found]
        return matrix.rows["chunk"][positions].tolist(), matrix.similarity(query_vector, positions).tolist()


def _best_rows(similarity: np.ndarray, record_numbers: np.ndarray, records: int) -> np.ndarray:
    """Positions of each record's most similar row, best first (ties by position), for the best `records`."""
    import numpy as np

    total = similarity.size
    take = min(total, records * 4)
    while True:
        if take < total:
            top = np.argpartition(similarity, total - take)[total - take :]
            top.sort()
        else:
            top = np.arange(total)
        order = top[np.argsort(-similarity[top], kind="stable")]
        _, first = np.unique(record_numbers[order], return_index=True)
        if first.size >= records or take == total:
            return order[np.sort(first)[:records]]
        take = min(total, take * 4)

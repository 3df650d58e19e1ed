"""The vector matrix files kept beside a projection, for exact search with NumPy.

SQLite holds one float32 blob per distinct embedding text (the durable copy). After a sync that
changed anything, the writer lays the vectors of every chunk out in immutable `.npy` files:

- vector segments `<index>.vectors-<token>.npy`: float32 [rows, dimension], one row per chunk,
  named by the generation that wrote them;
- `<index>.rows-<token>.npy`: one entry per row of the segments taken in order: the chunk id, a
  record number and the codes of the record's scope, status, access and kind, so filters run as
  NumPy masks before ranking. A row whose chunk is gone is dead: its status code matches nothing.

A sync that only adds chunks writes a segment with the new chunks' vectors and a new rows file,
and keeps the earlier segments (rewriting a large matrix for one edited record costs seconds).
Once dead rows or segments pile up, the writer lays everything out again as one segment.

Which files make up the current matrix (the `Layout`) is recorded in the projection's metadata in
the same transaction that makes them current, so a reader's snapshot always names files that match
it. A one-shot process maps the files (`mmap_mode="r"`) instead of reading every blob; a
long-running process keeps the few most recent mappings whose files still exist.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ..core.atomic import fsync_directory
from ..core.dirs import PRIVATE_FILE_MODE
from ..core.records import ACCESS_CLASSES, KINDS, STATUSES
from . import projection as pj

if TYPE_CHECKING:
    import numpy as np

ROW_DTYPE = [("chunk", "<i8"), ("record", "<i4"), ("scope", "<i2"), ("status", "i1"), ("access", "i1"), ("kind", "i1")]
DEAD = -1  # status code of a row whose chunk is gone
MAX_SEGMENTS = 8
MAX_DEAD_SHARE = 0.25  # beyond this share of dead rows, the next write lays the matrix out afresh
_CACHE_SIZE = 4
_PASSING_CACHE = 8  # filter combinations remembered per matrix


@dataclass(frozen=True)
class Layout:
    """The files of one matrix: the rows file of `token` and the vector segments, in row order."""

    token: str
    scopes: tuple[str, ...]  # `scopes[code]` names a row's scope code
    segments: tuple[str, ...]

    @classmethod
    def current(cls, settings: Mapping[str, str]) -> Layout | None:
        """The layout the projection's settings name when it describes their current generation.

        Every change to chunks bumps the generation; a current matrix holds a row for every chunk
        that has a vector, and the projection's `vector_pending` counts the texts still waiting
        for one (a step of a backlog writes the matrix again, under a token of its own).
        """
        if settings.get(pj.VECTOR_GENERATION) != settings.get(pj.GENERATION) or pj.VECTOR_FILES not in settings:
            return None
        return cls.parse(settings[pj.VECTOR_FILES])

    @classmethod
    def parse(cls, value: str) -> Layout:
        """From the projection's `vector_files` setting (a matrix of one segment may omit the list)."""
        data = json.loads(value)
        return cls(data["token"], tuple(data["scopes"]), tuple(data.get("segments", [data["token"]])))

    def dumps(self) -> str:
        return json.dumps({"token": self.token, "scopes": list(self.scopes), "segments": list(self.segments)})

    def rows_path(self, index_path: Path) -> Path:
        return index_path.with_name(f"{index_path.name}.rows-{self.token}.npy")

    def segment_paths(self, index_path: Path) -> list[Path]:
        return [segment_path(index_path, segment) for segment in self.segments]

    def paths(self, index_path: Path) -> list[Path]:
        return [self.rows_path(index_path), *self.segment_paths(index_path)]


def segment_path(index_path: Path, token: str) -> Path:
    return index_path.with_name(f"{index_path.name}.vectors-{token}.npy")


@dataclass(frozen=True)
class Matrix:
    """Mapped vector segments plus the row metadata of one layout."""

    layout: Layout
    segments: tuple[np.ndarray, ...]
    rows: np.ndarray
    _passing: dict[tuple[object, ...], np.ndarray] = field(default_factory=dict, compare=False, repr=False)
    _passing_lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @property
    def size(self) -> int:
        return int(self.rows.shape[0])

    @property
    def dead(self) -> int:
        return int((self.rows["status"] == DEAD).sum())

    def similarity(self, query_vector: np.ndarray, positions: np.ndarray | None = None) -> np.ndarray:
        """The dot product of each row (or of the rows at sorted `positions`) with the query, on this
        thread. (A BLAS product would start its own threads; beside the query embedding and other
        processes on a small machine, that made the median product four times slower.)"""
        import numpy as np

        parts = [np.einsum("ij,j->i", part, query_vector) for part in self._parts(positions)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def rows_of(self, chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each of the sorted `chunks`, its position (meaningful only where found) and whether it is
        found. Rows are in chunk order (chunk ids only grow, and each new segment holds newer chunks)."""
        import numpy as np

        if not self.size:
            return np.zeros(len(chunks), dtype=np.int64), np.zeros(len(chunks), dtype=bool)
        position = np.minimum(np.searchsorted(self.rows["chunk"], chunks), self.size - 1)
        return position, self.rows["chunk"][position] == chunks

    def vectors(self, positions: np.ndarray) -> np.ndarray:
        """Copies of the vectors of the rows at sorted `positions`."""
        import numpy as np

        return np.concatenate(list(self._parts(positions)))

    def _parts(self, positions: np.ndarray | None) -> Iterator[np.ndarray]:
        """Each segment, or its rows among the sorted `positions` (counted over all segments)."""
        import numpy as np

        start = 0
        for segment in self.segments:
            end = start + segment.shape[0]
            if positions is None:
                yield segment
            else:
                lo, hi = np.searchsorted(positions, (start, end))
                yield segment[positions[lo:hi] - start]
            start = end

    def rows_passing(self, statuses: Sequence[str], scopes: Sequence[str], access: Sequence[str] | None,
                     kinds: Sequence[str] | None) -> np.ndarray:  # fmt: skip
        """Positions of the rows whose record passes every filter (remembered per filter: the files
        never change)."""
        import numpy as np

        key = (tuple(statuses), tuple(scopes), None if access is None else tuple(access),
               None if kinds is None else tuple(kinds))  # fmt: skip
        with self._passing_lock:
            found = self._passing.get(key)
        if found is None:
            keep = np.isin(self.rows["status"], _codes(STATUSES, statuses))
            keep &= np.isin(self.rows["scope"], _codes(self.layout.scopes, scopes))
            if access is not None:
                keep &= np.isin(self.rows["access"], _codes(ACCESS_CLASSES, access))
            if kinds is not None:
                keep &= np.isin(self.rows["kind"], _codes(KINDS, kinds))
            found = np.flatnonzero(keep)
            with self._passing_lock:
                self._passing[key] = found
                if len(self._passing) > _PASSING_CACHE:
                    del self._passing[next(iter(self._passing))]
        return found


def _codes(names: Sequence[str], wanted: Sequence[str]) -> list[int]:
    return [index for index, name in enumerate(names) if name in wanted]


@dataclass(frozen=True)
class CodeTables:
    """Name → code for each filter field of the row file."""

    scope: dict[str, int]
    status: dict[str, int]
    access: dict[str, int]
    kind: dict[str, int]


def code_tables(scopes: Sequence[str]) -> CodeTables:
    def table(names: Sequence[str]) -> dict[str, int]:
        return {name: code for code, name in enumerate(names)}

    return CodeTables(table(scopes), table(STATUSES), table(ACCESS_CLASSES), table(KINDS))


def all_matrix_files(index_path: Path) -> list[Path]:
    """Every matrix file of this projection name, current or not."""
    directory = index_path.parent
    if not directory.is_dir():
        return []
    prefixes = (f"{index_path.name}.vectors-", f"{index_path.name}.rows-")
    return sorted(
        entry
        for entry in directory.iterdir()
        if entry.name.startswith(prefixes) and entry.name.endswith(".npy") and not entry.is_symlink()
    )


@dataclass(frozen=True)
class Segment:
    """A new segment's vectors, `count` float32 rows of `dimension`, given block by block so that a
    writer never holds a second copy of a large matrix."""

    count: int
    dimension: int
    blocks: Iterable[np.ndarray]


def write(index_path: Path, layout: Layout, rows: np.ndarray, segment: Segment | None) -> None:
    """Write the rows file of `layout` and, given `segment`, its last segment (temp file, fsync,
    rename); the earlier segments must exist already. ValueError when the blocks do not hold
    exactly `segment.count` rows."""
    import numpy as np

    if segment is not None:
        _save_atomic(segment_path(index_path, layout.segments[-1]), lambda handle: _stream(handle, segment))
    _save_atomic(layout.rows_path(index_path), lambda handle: np.save(handle, rows, allow_pickle=False))
    fsync_directory(index_path.parent)


def _stream(handle: BinaryIO, segment: Segment) -> None:
    """`segment` as one `.npy` array: the header, then each block's bytes."""
    import numpy as np

    header = {"descr": "<f4", "fortran_order": False, "shape": (segment.count, segment.dimension)}
    np.lib.format.write_array_header_1_0(handle, header)
    written = 0
    for block in segment.blocks:
        if block.ndim != 2 or block.shape[1] != segment.dimension:
            raise ValueError("a vector block has the wrong shape")
        handle.write(np.ascontiguousarray(block, dtype="<f4").data.cast("B"))  # its bytes, not a copy of them
        written += block.shape[0]
    if written != segment.count:
        raise ValueError(f"{segment.count} vectors were due, {written} came")


def _save_atomic(path: Path, fill: Callable[[BinaryIO], None]) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE), "wb") as handle:
            fill(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def remove_except(index_path: Path, layout: Layout | None) -> None:
    """Delete matrix files of this projection that `layout` does not use."""
    keep = set(layout.paths(index_path)) if layout else set()
    for path in all_matrix_files(index_path):
        if path not in keep:
            path.unlink(missing_ok=True)


_cache: OrderedDict[Path, Matrix] = OrderedDict()  # matrix files are immutable: a name never changes content
_cache_lock = threading.Lock()


def load(index_path: Path, layout: Layout) -> Matrix | None:
    """Map the files of `layout`; None when they are missing or unreadable (a writer replaced them)."""
    import numpy as np

    rows_path = layout.rows_path(index_path)
    with _cache_lock:
        cached = _cache.get(rows_path)
        if cached is not None and cached.layout == layout:
            _cache.move_to_end(rows_path)
            return cached
    try:
        rows = np.load(rows_path, mmap_mode="r", allow_pickle=False)
        segments = tuple(np.load(path, mmap_mode="r", allow_pickle=False) for path in layout.segment_paths(index_path))
    except (OSError, ValueError):
        return None
    if (
        not segments
        or any(segment.ndim != 2 or segment.shape[1] != segments[0].shape[1] for segment in segments)
        or rows.dtype != np.dtype(ROW_DTYPE)
        or rows.shape != (sum(segment.shape[0] for segment in segments),)
    ):
        return None
    matrix = Matrix(layout, segments, rows)
    with _cache_lock:
        for gone in [path for path in _cache if not path.exists()]:
            del _cache[gone]  # a writer removed its files: its pages would stay mapped for nobody
        _cache[rows_path] = matrix
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return matrix

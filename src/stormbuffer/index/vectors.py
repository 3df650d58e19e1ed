"""The vector matrix files kept beside a projection, for exact search with NumPy.

SQLite holds one float32 blob per distinct embedding text (the durable copy). After a sync that
changed anything, the writer lays the vectors of every chunk out as two immutable `.npy` files:

- `<index>.vectors-<token>.npy`: float32 [rows, dimension], one row per chunk;
- `<index>.rows-<token>.npy`: per row the chunk id, a record number and the codes of the record's
  scope, status, access and kind, so filters run as NumPy masks before ranking.

The token (projection id + generation) is recorded in the projection's metadata in the same
transaction that makes the files current, so a reader's snapshot always names files that match
it. A one-shot process maps the files (`mmap_mode="r"`) instead of reading every blob; a
long-running process keeps the few most recent mappings.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.atomic import fsync_directory
from ..core.records import ACCESS_CLASSES, KINDS, STATUSES

if TYPE_CHECKING:
    import numpy as np

ROW_DTYPE = [("chunk", "<i8"), ("record", "<i4"), ("scope", "<i2"), ("status", "i1"), ("access", "i1"), ("kind", "i1")]
_CACHE_SIZE = 4
_PASSING_CACHE = 8  # filter combinations remembered per matrix


@dataclass(frozen=True)
class Matrix:
    """Mapped vectors plus the row metadata; `scopes[code]` names a scope code."""

    vectors: np.ndarray
    rows: np.ndarray
    scopes: tuple[str, ...]
    _passing: dict[tuple[object, ...], np.ndarray] = field(default_factory=dict, compare=False, repr=False)
    _passing_lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

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
            keep &= np.isin(self.rows["scope"], _codes(self.scopes, scopes))
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


def file_names(index_path: Path, token: str) -> tuple[Path, Path]:
    return (
        index_path.with_name(f"{index_path.name}.vectors-{token}.npy"),
        index_path.with_name(f"{index_path.name}.rows-{token}.npy"),
    )


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


def write(index_path: Path, token: str, vectors: np.ndarray, rows: np.ndarray) -> None:
    """Write both files for `token` (temp file, fsync, rename); existing files are replaced."""
    for path, array in zip(file_names(index_path, token), (vectors, rows), strict=True):
        _save_atomic(path, array)
    fsync_directory(index_path.parent)


def _save_atomic(path: Path, array: np.ndarray) -> None:
    import numpy as np

    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temp.open("wb") as handle:
            np.save(handle, array, allow_pickle=False)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def remove_except(index_path: Path, token: str | None) -> None:
    """Delete matrix files of this projection other than those of `token`."""
    keep = set(file_names(index_path, token)) if token else set()
    for path in all_matrix_files(index_path):
        if path not in keep:
            path.unlink(missing_ok=True)


_cache: OrderedDict[Path, Matrix] = OrderedDict()  # matrix files are immutable: a name never changes content
_cache_lock = threading.Lock()


def load(index_path: Path, token: str, scopes: Sequence[str]) -> Matrix | None:
    """Map the files of `token`; None when they are missing or unreadable (a writer replaced them)."""
    import numpy as np

    vectors_path, rows_path = file_names(index_path, token)
    with _cache_lock:
        cached = _cache.get(vectors_path)
        if cached is not None:
            _cache.move_to_end(vectors_path)
            return cached
    try:
        vectors = np.load(vectors_path, mmap_mode="r", allow_pickle=False)
        rows = np.load(rows_path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return None
    if vectors.ndim != 2 or rows.shape != (vectors.shape[0],) or rows.dtype != np.dtype(ROW_DTYPE):
        return None
    matrix = Matrix(vectors, rows, tuple(scopes))
    with _cache_lock:
        _cache[vectors_path] = matrix
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return matrix

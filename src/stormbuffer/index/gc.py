"""Removing disposable data: stale locks, temporaries, logs, unused vector files, the projection's
free pages, and on request the projection itself.

The free pages (left by forgotten records, re-chunked bodies and replaced vectors) are given back in
place: a projection not yet in incremental auto-vacuum mode is switched to it by one `VACUUM`, later
ones by `incremental_vacuum`; then the write-ahead log is checkpointed and truncated. Both are
writes in WAL mode: readers keep reading their snapshot meanwhile, never blocked.

A PostgreSQL store's projection is in its database: gc vacuums the projection's tables there (readers
and writers go on meanwhile) and reports the row versions it found dead and the bytes the tables
shrank by; with `include_index` it first rebuilds the store's projection from its records. A SQLite
projection left in such a store's directory is unused and always removed.

Never touches `store.toml`, `.gitignore`, record files, the mutation lock, the projection lock or
the recovery journals. The projection and the vector files it uses are kept unless asked for
(`include_index`): removing them makes the next search rebuild the index and embed every record
again. The model cache is shared by every store on the machine, so it is removed only when asked
for explicitly (`include_models`).
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import IndexUnavailable
from ..core.stores import StorePaths
from . import projection as pj
from . import vectors as vector_files
from .sync import SyncReport, projection_lock

if TYPE_CHECKING:
    from ..engines.postgresql.upkeep import Compacted

KEPT_NAMES = ("mutation.lock", "supersede.toml", "import.toml")


@dataclass
class GcReport:
    dry_run: bool
    candidates: list[tuple[str, int]] = field(default_factory=list)  # (label, bytes), sorted by label
    removed: int = 0
    free_pages: int = 0  # bytes of the projection's free pages (given back unless dry_run)
    database: Compacted | None = None  # a PostgreSQL store: its projection's tables vacuumed
    rebuilt: SyncReport | None = None  # a PostgreSQL store with `include_index`: its projection rebuilt

    @property
    def reclaimed_bytes(self) -> int:
        return sum(size for _, size in self.candidates) + self.free_pages


def gc_store(
    paths: StorePaths, *, dry_run: bool, include_index: bool = False, include_models: bool = False
) -> GcReport:
    """List (and unless `dry_run`, delete) disposable files, holding the mutation and projection locks; for
    a PostgreSQL store, then rebuild (`include_index`) and vacuum its projection in the database."""
    from ..core.repository import Repository
    from ..engines.projection import database_variable

    report = GcReport(dry_run)
    repository = Repository(paths)
    database = database_variable(paths)
    local_index = include_index or database is not None  # a PostgreSQL store uses no SQLite projection
    with ExitStack() as locks:
        locks.enter_context(repository.locked())
        locks.enter_context(projection_lock(paths))
        if include_models:
            from ..embedding.cache import models_lock

            locks.enter_context(models_lock(paths.cache_dir, shared=False))
        found = _candidates(paths, local_index, include_models)
        report.candidates = sorted((label, _size(path)) for label, path in found.items())
        index_path = pj.existing_index_path(paths)
        if index_path is not None and not local_index:
            report.free_pages = _free_bytes(index_path)
        if not dry_run:
            for label, _size_bytes in report.candidates:
                found[label].unlink(missing_ok=True)
                report.removed += 1
            if index_path is not None and not local_index:
                pj.give_back_space_of(index_path, thorough=True)
    if database is not None:
        from ..engines.postgresql.upkeep import compact, rebuild

        if include_index and not dry_run:
            report.rebuilt = rebuild(paths, repository.engine)
        report.database = compact(database, dry_run=dry_run)
    return report


def reclaimable_bytes(paths: StorePaths) -> int:
    """What `gc_store` (without the projection itself or the models) would give back now; read only."""
    from ..engines.projection import database_variable

    unused = database_variable(paths) is not None  # a PostgreSQL store's SQLite projection: all of it
    index_path = None if unused else pj.existing_index_path(paths)
    found = _candidates(paths, include_index=unused, include_models=False)
    return sum(map(_size, found.values())) + (_free_bytes(index_path) if index_path is not None else 0)


def _free_bytes(index_path: Path) -> int:
    try:
        with pj.reading(index_path) as conn:
            return pj.free_bytes(conn)
    except IndexUnavailable:
        return 0


def _candidates(paths: StorePaths, include_index: bool, include_models: bool) -> dict[str, Path]:
    from .doctor import used_matrix_files

    found: dict[str, Path] = {}
    index_path = pj.existing_index_path(paths) or paths.index_path
    index_label = "" if paths.kind == "project" else "cache/"
    unused = set(vector_files.all_matrix_files(index_path)) - used_matrix_files(index_path)
    for entry in _files(index_path.parent, recursive=False):
        if entry.name.startswith(index_path.name) and (include_index or entry in unused):
            found[f"{index_label}{entry.name}"] = entry
    for name in ("locks", "tmp", "logs"):
        for entry in _files(paths.root / name, recursive=True):
            if entry.name not in KEPT_NAMES:
                found[entry.relative_to(paths.root).as_posix()] = entry
    for entry in _files(paths.root, recursive=True):
        if entry.name.endswith(".tmp"):
            found[entry.relative_to(paths.root).as_posix()] = entry
    if include_models:
        for entry in _files(paths.models_dir, recursive=True):
            if entry.name != ".lock":
                found[f"cache/models/{entry.relative_to(paths.models_dir).as_posix()}"] = entry
    return found


def _files(directory: Path, *, recursive: bool) -> list[Path]:
    """Regular files and symlinks below `directory`; symlinked directories are not entered."""
    if not directory.is_dir() or directory.is_symlink():
        return []
    found = []
    for parent, dirs, names in os.walk(directory):
        found += [Path(parent, name) for name in names]
        found += [Path(parent, name) for name in dirs if Path(parent, name).is_symlink()]
        if not recursive:
            break
    return found


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except FileNotFoundError:
        return 0

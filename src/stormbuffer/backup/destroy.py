"""Removing a whole store: a preview of what would go, then destruction under the mutation lock.

The global store's projection lives in the shared cache; it goes too, but the model cache stays.
An optional recovery archive is written (and verified) before anything is removed. A PostgreSQL
store's rows (records, projection, anything else keyed by the store) are deleted in the transaction
that holds its write lock; once that has committed, its directory goes.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import InvalidInput
from ..core.repository import Repository
from ..core.scopes import GLOBAL
from ..core.stores import StorePaths, read_config
from ..core.usage import canonical_bytes, disposable_bytes, projection_files, tree_bytes
from ..engines.directory import record_files
from .archive import decode_archive, encode_archive
from .transfer import Progress, export_store, write_export


@dataclass(frozen=True)
class StoreSummary:
    store_id: str  # the project id, or "global"
    scope: str
    root: Path
    store_root_bytes: int
    records: int
    canonical_bytes: int
    disposable_bytes: int


def preview_destruction(paths: StorePaths) -> StoreSummary:
    """What destroying the store would remove; raises NotInitialized. Creates nothing."""
    config = read_config(paths)
    records, canonical = len(record_files(paths.records)), canonical_bytes(paths)
    if config.database is not None:
        from ..engines.postgresql.upkeep import counts

        found = counts(config.database, config.record_scope)
        records, canonical = found.records, canonical + found.record_bytes
    return StoreSummary(
        store_id=config.project_id or GLOBAL,
        scope=config.record_scope,
        root=paths.root,
        store_root_bytes=tree_bytes(paths.root),
        records=records,
        canonical_bytes=canonical,
        disposable_bytes=disposable_bytes(paths),
    )


def destroy_store(
    paths: StorePaths, expected_id: str, export_to: Path | None = None, progress: Progress | None = None
) -> Path | None:
    """Remove the store if its id is `expected_id`, after writing a verified archive to `export_to`.

    Returns the archive's resolved path (None without export). Nothing is removed when the id does
    not match or the export fails.
    """
    repository = Repository(paths)
    in_database = read_config(paths).database is not None
    with repository.locked():
        store_id = preview_destruction(paths).store_id
        if store_id != expected_id:
            raise InvalidInput(f"store id mismatch: expected `{expected_id}`, got `{store_id}`")
        written = None
        if export_to is not None:
            data = encode_archive(export_store(paths, progress))
            decode_archive(data)
            written = write_export(paths, data, export_to)
        repository.engine.erase()
        if not in_database:  # the mutation lock is a file in the directory: removed while held
            _remove_files(paths)
    if in_database:  # the rows are gone (committed): now the directory
        _remove_files(paths)
    return written


def _remove_files(paths: StorePaths) -> None:
    if paths.kind == "global":
        for path in projection_files(paths):
            path.unlink()
    shutil.rmtree(paths.root)

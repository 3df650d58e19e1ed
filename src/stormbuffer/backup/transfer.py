"""Export a store to an archive and import an archive into a store.

Exports read every record file (all statuses) without the lock. Imports are all-or-nothing:
under the mutation lock the store is scanned, the import planned, and every planned file written
through `core.staging`, so a process killed mid-import leaves the store as it was or fully
imported. A dry run plans against an unlocked scan and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..core import staging
from ..core.atomic import write_atomic
from ..core.errors import InvalidInput
from ..core.repository import Repository
from ..core.stores import StorePaths
from .archive import Archive, ArchiveRecord
from .planning import ImportPlan, Policies, plan_import

# progress(phase label, done, total)
Progress = Callable[[str, int, int], None]


def phase(progress: Progress | None, label: str) -> Callable[[int, int], None] | None:
    """A per-phase `(done, total)` callback feeding `progress`, or None."""
    if progress is None:
        return None
    return lambda done, total: progress(label, done, total)


def export_store(paths: StorePaths, progress: Progress | None = None) -> Archive:
    """Every record file of the store (any status), sorted by store-relative path."""
    repository = Repository(paths)
    stored = repository.scan(phase(progress, "Reading records"))
    records = [
        ArchiveRecord(item.path.relative_to(paths.root).as_posix(), item.data.decode("utf-8"), item.record)
        for item in stored
    ]
    return Archive(repository.scope, tuple(sorted(records, key=lambda item: item.path)))


def write_export(paths: StorePaths, data: bytes, destination: Path) -> Path:
    """Write archive bytes atomically to a destination outside the store; return the resolved path."""
    target = _resolve_destination(destination)
    root = paths.root.resolve()
    if target == root or target.is_relative_to(root):
        raise InvalidInput("export destination must be outside the selected store")
    write_atomic(target, data)
    return target


def _resolve_destination(destination: Path) -> Path:
    if destination.is_dir():
        raise InvalidInput("export destination is a directory")
    if destination.exists():
        return destination.resolve(strict=True)
    if not destination.parent.is_dir():
        raise InvalidInput("export destination directory does not exist")
    return destination.parent.resolve(strict=True) / destination.name


def import_archive(
    paths: StorePaths,
    archive: Archive,
    policies: Policies,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> ImportPlan:
    """Plan the import and, unless `dry_run`, write all of it or nothing; return the plan."""
    repository = Repository(paths)
    reading = phase(progress, "Reading store")
    if dry_run:
        return plan_import(archive, repository.scan_read_only(reading), repository.scope, paths.root, policies)
    with repository.locked():
        plan = plan_import(archive, repository.scan(reading), repository.scope, paths.root, policies)
        writes = [staging.FileWrite(paths.root / item.destination, item.data, item.before) for item in plan.writes]
        repository.engine.write_all(writes, phase(progress, "Writing records"))
    return plan

"""Records as Markdown files: the directory engine's reads, its lock and its unit of work.

A write takes the store's mutation lock (waiting up to a bound; still busy → MutationBusy), rolls
an interrupted supersession or import forward and then checks only what it touches: the projection,
brought up to date by its stat-based check, names the files of the ids involved and of the records
that could be duplicates or overlaps (same scope, kind and normalized title); those files are read
and parsed (`transaction.py`). When the projection cannot be used, every record file is parsed
instead. The write then projects what it changed. Reads take no lock. In a long-running process
(`freshness`), the check re-stats only the files its watcher reported.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ...core import journal, staging
from ...core.codec import parse_markdown
from ...core.errors import (
    IndexBusy,
    IndexUnavailable,
    MutationBusy,
    RecordError,
    ScopeDenied,
    StoreError,
    StoreIntegrityError,
)
from ...core.locks import LockBusy, exclusive_lock
from ...core.records import RecordSummary
from ...core.stores import StorePaths
from ..base import FileWrite, Invalid, Progress, StoredRecord
from .transaction import Catalog, DirectoryTransaction, Scanned

if TYPE_CHECKING:
    from ...index.freshness import StoreFreshness


def record_files(records_dir: Path) -> list[Path]:
    """Every regular `*.md` file below the records directory (symlinks ignored), sorted by path."""
    if not records_dir.is_dir():
        return []
    found = [path for path in records_dir.rglob("*.md") if path.is_file() and not path.is_symlink()]
    return sorted(found, key=lambda path: path.as_posix())


def recover_interrupted(paths: StorePaths) -> None:
    """Roll an interrupted supersession or import forward. The caller holds the mutation lock."""
    journal.recover(paths)
    staging.recover(paths)


class DirectoryStore:
    """The `RecordStore` of a directory of Markdown files."""

    def __init__(self, paths: StorePaths, scope: str, lock_wait: float, freshness: StoreFreshness | None) -> None:
        self.paths = paths
        self.scope = scope
        self.lock_wait = lock_wait
        self.freshness = freshness

    # ---- reading -------------------------------------------------------------------------

    def scan(self, progress: Progress | None, *, recover: bool, leave_out_invalid: bool) -> tuple[
        list[StoredRecord], Invalid
    ]:  # fmt: skip
        if recover:
            self._recover_if_idle()
        seen: set[str] = set()
        stored, invalid = [], []
        files = record_files(self.paths.records)
        for done, path in enumerate(files, 1):
            try:
                item = self._read(path)
            except RecordError as exc:
                if not leave_out_invalid:
                    raise
                invalid.append((path.relative_to(self.paths.root).as_posix(), exc.detail))
                continue
            if item.record.scope != self.scope:
                raise ScopeDenied(item.record.id)
            if item.record.id in seen:
                raise StoreIntegrityError(f"record {item.record.id} appears in multiple files")
            seen.add(item.record.id)
            stored.append(item)
            if progress is not None:
                progress(done, len(files))
        return stored, invalid

    def find(self, record_id: str) -> StoredRecord:
        """`records/<id>.md` when it holds the record, else the file the projection names."""
        self._recover_if_idle()
        direct = self.paths.records / f"{record_id}.md"
        if direct.is_file() and not direct.is_symlink():
            item = self._read(direct)
            if item.record.id == record_id:
                if item.record.scope != self.scope:
                    raise ScopeDenied(record_id)
                return item
        catalog = self._catalog(wait=0.0)
        try:
            return DirectoryTransaction(self.paths, self.scope, catalog).get(record_id, guarded=False)
        finally:
            catalog.close()

    def listing(self) -> tuple[list[RecordSummary], Invalid]:
        """Read from the projection after its stat-based check (in a long-running process, its
        watcher's), not from every file."""
        self._recover_if_idle()
        if self.freshness is not None:
            from ...index.catalog import warm_listing

            found = warm_listing(self.paths, self.freshness)
            if found is not None:
                return found
        catalog = self._catalog(wait=0.0)
        try:
            return catalog.summaries(), catalog.invalid_files
        finally:
            catalog.close()

    def review_records(self) -> tuple[list[StoredRecord], Invalid]:
        """Each file parsed, found through the projection after its stat-based check rather than by
        parsing every file. Like a scan, it rolls no interrupted supersession forward; only the
        projection, derived data, is written."""
        catalog = self._catalog(wait=0.0)
        try:
            invalid = list(catalog.invalid_files)
            stored = self._read_valid(catalog.review_paths(), invalid)
            known = {item.record.id for item in stored}
            superseded = dict.fromkeys(old for item in stored for old in item.record.supersedes if old not in known)
            found = (catalog.path_of(record_id) for record_id in superseded)
            stored += self._read_valid([path for path in found if path is not None], invalid)
        finally:
            catalog.close()
        return sorted(stored, key=lambda item: item.path.as_posix()), invalid

    def _read_valid(self, paths: list[Path], invalid: Invalid) -> list[StoredRecord]:
        """The records in `paths` now; a file gone meanwhile is left out, an invalid one added to `invalid`."""
        stored = []
        for path in paths:
            try:
                stored.append(self._read(path))
            except FileNotFoundError:
                continue
            except RecordError as exc:
                invalid.append((path.relative_to(self.paths.root).as_posix(), exc.detail))
        return stored

    def _read(self, path: Path) -> StoredRecord:
        data = path.read_bytes()
        return StoredRecord(parse_markdown(data, path.name), path, data)

    def _recover_if_idle(self) -> None:
        """Readers finish an interrupted supersession or import when no writer is active."""
        if self.paths.journal.exists() or self.paths.import_journal.exists():
            try:
                with exclusive_lock(self.paths.mutation_lock):
                    recover_interrupted(self.paths)
            except LockBusy:
                pass

    def _catalog(self, wait: float, freshness: StoreFreshness | None = None) -> Catalog:
        """The projection as the catalog of a check, or every file parsed when it cannot be used."""
        from ...index.catalog import open_catalog

        try:
            return open_catalog(self.paths, self.scope, wait, freshness)
        except (IndexBusy, IndexUnavailable, StoreError):
            return Scanned(self.scan(None, recover=False, leave_out_invalid=False)[0])

    # ---- writing -------------------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        try:
            with exclusive_lock(self.paths.mutation_lock, wait=self.lock_wait):
                recover_interrupted(self.paths)
                yield
        except LockBusy:
            raise MutationBusy() from None

    @contextmanager
    def transaction(self) -> Iterator[DirectoryTransaction]:
        from ...index.catalog import ready_to_write

        ready_to_write(self.paths)
        with self.locked():
            catalog = self._catalog(wait=self.lock_wait, freshness=self.freshness)
            mutation = DirectoryTransaction(self.paths, self.scope, catalog)
            try:
                yield mutation
            finally:
                if mutation.changes:
                    catalog.written(mutation.changes)
                catalog.close()

    def write_all(self, writes: Sequence[FileWrite], progress: Progress | None) -> None:
        staging.commit(self.paths, writes, progress)

    def erase(self) -> None:
        """Nothing: the records are files in the store's directory, which goes with them."""

"""What a mutation looks up, answered by the projection instead of by parsing every record file.

`open_catalog` brings the projection up to date with the stat-based check (a scan of the records
directory compared with what the last sync stored; only changed files are read) and then answers
the repository's questions through the sqlite3 driver: where the file of an id is, which files hold
a candidate or active record with a given scope, kind and normalized title, and which files are
invalid. The repository reads and checks those few files itself.

After writing, the mutation hands its changes back (`written`): the changed records are projected in
the same way a sync would (rows, chunks, postings) and the stored digest of the files is moved on, so
the next read finds the projection current without reading anything. That happens only when nobody
synced in between (otherwise that sync saw the change); a busy or unusable projection is left for the
next sync to catch up.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path

from ..core.errors import IndexBusy
from ..core.records import Record, RecordSummary, normalize
from ..core.stores import StorePaths
from . import postings
from . import projection as pj
from .sync import (
    SyncReport,
    files_fingerprint,
    project_records,
    projection_lock,
    scan_files,
    sync_scanned,
    token_counter,
)

MATCHING = ("candidate", "active")


class Catalog:
    """The projection of one store as the index of a mutation in progress (the mutation lock is held)."""

    def __init__(
        self, paths: StorePaths, files: dict[str, tuple[int, int, int]], fingerprint: str, report: SyncReport
    ) -> None:
        self.paths = paths
        self.invalid_files = [(f"records/{name}", message) for name, message in report.invalid_files]
        self._files = files
        self._conn = pj.connect(paths.index_path)
        settings = pj.get_settings(self._conn)
        self._generation = settings.get(pj.GENERATION)
        self._current = settings.get(pj.FILES) == fingerprint  # the stored digest describes `files`

    def close(self) -> None:
        self._conn.close()

    def path_of(self, record_id: str) -> Path | None:
        """The file that holds `record_id`, as the projection knows it."""
        row = self._conn.execute("SELECT path FROM records WHERE id = ?", (record_id,)).fetchone()
        return None if row is None else self.paths.root / row[0]

    def title_matches(self, scope: str, kind: str, title: str) -> list[Path]:
        """Files of candidate or active records with this scope, kind and normalized title, by path."""
        rows = self._conn.execute(
            "SELECT path FROM records WHERE title_key = ? AND kind = ? AND scope = ? AND status IN (?, ?) "
            "ORDER BY path",
            (normalize(title), kind, scope, *MATCHING),
        )
        return [self.paths.root / path for (path,) in rows]

    def summaries(self) -> list[RecordSummary]:
        """Every projected record's id, title, kind, scope and status, by id."""
        rows = self._conn.execute("SELECT id, title, kind, scope, status FROM records ORDER BY id")
        return [RecordSummary(*row) for row in rows]

    def written(self, changes: list[tuple[Path, Record | None, bytes | None]]) -> None:
        """Project what the mutation wrote: (file, record and bytes now in it, or None when removed)."""
        try:
            with projection_lock(self.paths, wait=1.0):
                self._project(changes)
        except (IndexBusy, OSError, sqlite3.Error, pj.ProjectionUnusable):
            return  # the next sync reads the changed files

    def _project(self, changes: list[tuple[Path, Record | None, bytes | None]]) -> None:
        conn = pj.connect(self.paths.index_path, writer=True)
        try:
            conn.execute("BEGIN IMMEDIATE")
            pj.check_version(conn)
            settings = pj.get_settings(conn)
            if settings.get(pj.GENERATION) != self._generation:
                return  # someone synced meanwhile and saw these files (rolled back on close)
            files = dict(self._files)
            pending: dict[str, str] = json.loads(settings.get(pj.VERIFY) or "{}")
            count = None
            for path, record, data in changes:
                name = path.relative_to(self.paths.root).as_posix()
                pending.pop(name, None)
                if record is None or data is None:
                    files.pop(name, None)
                    conn.execute("DELETE FROM records WHERE path = ?", (name,))
                    continue
                info = os.stat(path)
                stat = {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "inode": info.st_ino}
                files[name] = (info.st_size, info.st_mtime_ns, info.st_ino)
                sha256 = hashlib.sha256(data).hexdigest()
                pending[name] = sha256  # just written: its stat alone is not to be trusted yet
                count = count or token_counter(self.paths)
                project_records(conn, [(name, record, sha256, stat)], count)
            postings.apply_changes(conn)
            pj.set_settings(conn, {
                pj.GENERATION: str(int(self._generation or 0) + 1),
                pj.FILES: files_fingerprint(files) if self._current else "",
                pj.VERIFY: json.dumps(pending),
            })  # fmt: skip
            conn.execute("COMMIT")
        finally:
            conn.close()


def ready_to_write(paths: StorePaths) -> None:
    """Load what projecting a write needs (the tokenizer, NumPy for the postings) before the mutation
    lock is taken, so that other writers do not wait while it loads."""
    import numpy  # noqa: F401

    token_counter(paths)


def open_catalog(paths: StorePaths, scope: str, wait: float) -> Catalog:
    """The store's projection brought up to date, as a catalog. Raises IndexBusy when another writer
    keeps the projection longer than `wait` seconds, IndexUnavailable when it cannot be used."""
    with projection_lock(paths, wait=wait):
        files = scan_files(paths)
        fingerprint = files_fingerprint(files)
        report = sync_scanned(paths, scope, files, None, fingerprint=fingerprint)
        return Catalog(paths, files, fingerprint, report)

"""What a mutation looks up, answered by the projection instead of by parsing every record file.

`open_catalog` brings the projection up to date with the stat-based check (the record files' digest
compared with what the last sync stored; only changed files are read) and then answers
the repository's questions through the sqlite3 driver: where the file of an id is, which files hold
a candidate or active record with a given scope, kind and normalized title, and which files are
invalid. The repository reads and checks those few files itself.

After writing, the mutation hands its changes back (`written`): the changed records are projected in
the same way a sync would (rows, chunks, postings) and the stored digest of the files is moved on, so
the next read finds the projection current without reading anything. That happens only when nobody
synced in between (otherwise that sync saw the change); a busy or unusable projection is left for the
next sync to catch up.

A one-shot process scans every record file for the check and opens one connection. A long-running
process hands in its `StoreFreshness`: the check then re-stats only the paths the watcher reported
(`watched`), a write moves the kept list and its digest on by its own files, and the writer
connection stays open between writes.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import IndexBusy, IndexUnavailable, StoreError
from ..core.records import Record, RecordSummary, normalize
from ..core.stores import StorePaths
from . import postings
from . import projection as pj
from .sync import FileList, SyncReport, invalid_files, project_records, projection_lock, token_counter
from .watched import ProjectionConnection, WatchedFiles

if TYPE_CHECKING:
    from .freshness import StoreFreshness

MATCHING = ("candidate", "active")


class Catalog:
    """The projection of one store as the index of a mutation in progress (the mutation lock is held)."""

    def __init__(
        self, paths: StorePaths, files: FileList, report: SyncReport, conn: sqlite3.Connection,
        owned: ProjectionConnection | None,
    ) -> None:  # fmt: skip
        self.paths = paths
        self.invalid_files = [(f"records/{name}", message) for name, message in report.invalid_files]
        self._files = files
        self._conn = conn  # a writer's, used for the check, the lookups and the projection of the write
        self._owned = owned  # closed with the catalog (a one-shot process's); else kept by the process
        settings = pj.get_settings(conn)
        self._generation = settings.get(pj.GENERATION)
        self._current = settings.get(pj.FILES) == files.fingerprint()  # the stored digest describes `files`

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()
        elif self._conn.in_transaction:
            self._conn.rollback()

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
        return _summaries(self._conn)

    def review_paths(self) -> list[Path]:
        """Files of the candidates and of the candidate or active records each may overlap (same
        scope, kind and normalized title), by path."""
        rows = self._conn.execute(
            "SELECT DISTINCT other.path FROM records AS candidate JOIN records AS other ON "
            "other.title_key = candidate.title_key AND other.kind = candidate.kind AND other.scope = candidate.scope "
            "WHERE candidate.status = 'candidate' AND other.status IN (?, ?) ORDER BY other.path",
            MATCHING,
        )
        return [self.paths.root / path for (path,) in rows]

    def written(self, changes: list[tuple[Path, Record | None, bytes | None]]) -> None:
        """Project what the mutation wrote: (file, record and bytes now in it, or None when removed)."""
        try:
            with projection_lock(self.paths, wait=1.0):
                self._project(changes)
        except (IndexBusy, OSError, sqlite3.Error, pj.ProjectionUnusable):
            return  # the next sync reads the changed files

    def _project(self, changes: list[tuple[Path, Record | None, bytes | None]]) -> None:
        conn, files = self._conn, self._files
        try:
            conn.execute("BEGIN IMMEDIATE")
            pj.check_version(conn)
            settings = pj.get_settings(conn)
            generation = settings.get(pj.GENERATION)
            pending: dict[str, str] = json.loads(settings.get(pj.VERIFY) or "{}")
            count = None
            for path, record, data in changes:
                name = path.relative_to(self.paths.root).as_posix()
                pending.pop(name, None)
                if record is None or data is None:
                    files.set(name, None)
                    conn.execute("DELETE FROM records WHERE path = ?", (name,))
                    continue
                info = os.stat(path)
                stat = {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "inode": info.st_ino}
                files.set(name, (info.st_size, info.st_mtime_ns, info.st_ino))
                if generation != self._generation:
                    continue  # someone synced meanwhile and saw these files: only the list is kept up
                sha256 = hashlib.sha256(data).hexdigest()
                pending[name] = sha256  # just written: its stat alone is not to be trusted yet
                count = count or token_counter(self.paths)
                project_records(conn, [(name, record, sha256, stat)], count)
            if generation != self._generation:
                return  # rolled back below
            postings.apply_changes(conn)
            pj.set_settings(conn, {
                pj.GENERATION: str(int(self._generation or 0) + 1),
                pj.FILES: files.fingerprint() if self._current else "",
                pj.VERIFY: json.dumps(pending),
            })  # fmt: skip
            conn.execute("COMMIT")
            pj.give_back_space(conn)  # a forgotten large record's pages
            conn.execute("PRAGMA shrink_memory")  # a kept connection does not hold a large write's page cache
        finally:
            if conn.in_transaction:
                conn.rollback()


def _summaries(conn: sqlite3.Connection) -> list[RecordSummary]:
    rows = conn.execute("SELECT id, title, kind, scope, status FROM records ORDER BY id")
    return list(map(RecordSummary._make, rows))


def warm_listing(paths: StorePaths, warm: StoreFreshness) -> tuple[list[RecordSummary], list[tuple[str, str]]] | None:
    """A long-running process's listing: the projection brought up to date through its watcher (a full
    check only when something may have changed), then read on a connection of its own; the summaries
    and the invalid files as `Catalog` has them. None when the projection cannot be used now."""
    try:
        warm.sync(None)
        path = pj.existing_index_path(paths)
        if path is None:
            return None
        with pj.reading(path) as conn:
            return _summaries(conn), [(f"records/{name}", why) for name, why in invalid_files(conn)]
    except (IndexBusy, IndexUnavailable, StoreError, sqlite3.Error):
        return None


def ready_to_write(paths: StorePaths) -> None:
    """Load what projecting a write needs (the tokenizer, NumPy for the postings) before the mutation
    lock is taken, so that other writers do not wait while it loads."""
    import numpy  # noqa: F401

    token_counter(paths)


def open_catalog(paths: StorePaths, scope: str, wait: float, warm: StoreFreshness | None = None) -> Catalog:
    """The store's projection brought up to date, as a catalog; `warm`: the long-running process's
    freshness of this store, whose kept list of files and writer connection the check uses. Raises
    IndexBusy when another writer keeps the projection longer than `wait` seconds, IndexUnavailable
    when it cannot be used."""
    if warm is not None:
        watched, source, connection, owned = warm.files, warm.current_watcher(), warm.write_connection, False
    else:
        watched, source, connection, owned = WatchedFiles(paths), None, ProjectionConnection(paths), True
    try:
        with projection_lock(paths, wait=wait):
            report, files = watched.sync(source, scope, None, connection.get())
            conn = connection.get()  # the sync may have made or replaced the file
            if conn is None:
                raise IndexUnavailable(pj.UNAVAILABLE_MESSAGE)
            return Catalog(paths, files, report, conn, connection if owned else None)
    except sqlite3.Error as exc:
        connection.close()
        raise IndexUnavailable(pj.UNAVAILABLE_MESSAGE) from exc
    except BaseException:
        if owned:
            connection.close()
        raise

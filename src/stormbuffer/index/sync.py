"""Keeping the projection in step with the Markdown records.

`sync_store` is incremental. Each record file's (size, mtime_ns, inode) is compared with the
projection; only files whose metadata changed are read and hashed, and only files whose sha256
changed are parsed and re-chunked. A file written shortly before a sync looked at it is "racy"
(a later same-size edit could keep its mtime), so its metadata is stored smudged and it is hashed
again next time. Vectors are keyed by the sha256 of each chunk's embedding text, so only new
embedding texts reach the model; moved, re-tagged or re-statused records reuse theirs. Only the
first `VECTOR_CHUNKS` chunks of a record get vectors (the rest are searched lexically), and a caller
may bound how many texts one sync embeds (`embed_limit`): the vector matrix then covers the chunks
that have vectors, and `VECTOR_PENDING` says how many are still waiting (`backlog.py` embeds them).

`reindex_store` builds a fresh database beside the live one and renames it over.

Writers hold the store's non-blocking projection lock (busy → IndexBusy); readers take none.
"""

from __future__ import annotations

import functools
import hashlib
import json
import marshal
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..core.atomic import fsync_directory
from ..core.codec import parse_markdown
from ..core.errors import IndexBusy, IndexUnavailable, RecordError, StoreError
from ..core.locks import LockBusy, exclusive_lock
from ..core.records import Record, normalize
from ..core.stores import StorePaths, record_scope
from . import kept_chunks, postings
from . import projection as pj
from . import vectors as vector_files
from .chunking import VECTOR_CHUNKS, approximate_token_count, chunk_body, own_sentences, sentence_spans

if TYPE_CHECKING:
    import numpy as np
    from sqlalchemy import Connection, Engine

    from ..embedding import TokenCounter

RACY_WINDOW_NS = 2_000_000_000  # coarser than any local filesystem's timestamp granularity
EMBED_BATCH = 64  # texts per model call and per committed batch of vectors
READ_EMBED_LIMIT = 8  # texts a read embeds before it answers; more are a backlog (`backlog.py`)
SMUDGED = -1
OUTSIDE_SCOPE = "record is outside the selected store scope"
DUPLICATE = "duplicate record id; first seen at"


class Embedder(Protocol):
    """What sync and retrieval need from an embedding model."""

    model_id: str
    model_version: str
    model_checksum: str
    dimension: int
    max_tokens: int

    def token_count(self, text: str) -> int: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...


Progress = Callable[[str, int, int, "SyncReport"], None]
"""`progress(phase, done, total, report)`; phases "scanning" (files), "indexing" (records to project)
and "embedding" (texts to embed); `report` holds the running counts."""


@dataclass
class SyncReport:
    indexed: int = 0  # records (re)projected
    skipped: int = 0  # records already current
    removed: int = 0  # projected records whose file is gone or no longer valid
    invalid_files: list[tuple[str, str]] = field(default_factory=list)  # (path under records/, reason)
    hashed: int = 0  # files read and hashed because their metadata changed
    chunks: int = 0  # chunks written
    embedded: int = 0  # embedding texts sent to the model
    rebuilt: bool = False  # the projection was missing or unusable and was built from scratch
    vector_failure: str | None = None  # semantic fallback reason when vectors could not be refreshed
    pending: int = 0  # texts left without vectors because the embedding limit was reached

    @property
    def complete(self) -> bool:
        return not self.invalid_files


Stat = tuple[int, int, int]  # size, mtime_ns, inode


@dataclass(frozen=True)
class FileStat:
    path: str  # store-relative, "records/…"
    size: int
    mtime_ns: int
    inode: int


def scan_files(paths: StorePaths) -> dict[str, Stat]:
    """Store-relative path → (size, mtime_ns, inode) of every regular `*.md` file below `records/`.

    Symlinks are neither followed nor listed; a file removed while the directory is read is not
    listed. Each file is looked up relative to its open directory (one path step, not the whole path).
    """
    if not paths.records.is_dir():
        raise StoreError("the canonical records directory is missing")
    found: dict[str, Stat] = {}
    directory = os.open(paths.records, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _scan_directory(directory, "records/", found)
    finally:
        os.close(directory)
    return found


def _scan_directory(directory: int, prefix: str, found: dict[str, Stat]) -> None:
    with os.scandir(directory) as entries:  # listed from a descriptor, an entry's stat is relative to it
        for entry in entries:
            name = entry.name
            if name.endswith(".md") and entry.is_file(follow_symlinks=False):
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                found[prefix + name] = (info.st_size, info.st_mtime_ns, info.st_ino)
            elif entry.is_dir(follow_symlinks=False):
                try:
                    child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=directory)
                except FileNotFoundError:
                    continue
                try:
                    _scan_directory(child, f"{prefix}{name}/", found)
                finally:
                    os.close(child)


@contextmanager
def projection_lock(paths: StorePaths, *, wait: float = 0.0) -> Iterator[None]:
    """Hold the store's projection lock, waiting up to `wait` seconds for it (busy → IndexBusy)."""
    try:
        with exclusive_lock(paths.projection_lock, wait=wait):
            yield
    except LockBusy:
        raise IndexBusy() from None


# ---- sync ------------------------------------------------------------------------------------


def sync_store(
    paths: StorePaths,
    embedder: Embedder | None = None,
    *,
    progress: Progress | None = None,
    embed_limit: int | None = None,
) -> SyncReport:
    """Bring the projection up to date with the records; with an embedder, the vectors too (at most
    `embed_limit` texts of them when given).

    Invalid files are reported (and their rows removed), never modified. Raises IndexBusy when
    another writer holds the projection, StoreError for an unusable store, IndexUnavailable when
    the projection cannot be created. A PostgreSQL store only gets its waiting vectors (`backlog.catch_up`).
    """
    from ..engines.projection import database_variable

    if database_variable(paths) is not None:
        from .backlog import catch_up

        return catch_up(paths, embedder, progress=progress, limit=embed_limit)
    scope = record_scope(paths)
    with projection_lock(paths):
        return sync_scanned(paths, scope, scan_files(paths), embedder, progress=progress, embed_limit=embed_limit)


def sync_scanned(
    paths: StorePaths,
    scope: str,
    files: dict[str, Stat],
    embedder: Embedder | None,
    *,
    progress: Progress | None = None,
    fingerprint: str | None = None,
    embed_limit: int | None = None,
    defer: bool = False,
) -> SyncReport:
    """`sync_store` for a caller that holds the projection lock and has just scanned the files (and
    perhaps computed their `files_fingerprint`). With `defer`, more than `embed_limit` texts to embed
    are all left for a background thread (none is embedded now)."""
    current = current_report(paths, files, embedder, fingerprint or files_fingerprint(files))
    if current is not None:
        return current
    engine, rebuilt = _open_for_writing(paths.index_path)
    try:
        report = _Sync(engine, paths, scope, embedder, progress, embed_limit=embed_limit, defer=defer).run(files)
        report.rebuilt = rebuilt
    finally:
        engine.dispose()
    pj.give_back_space_of(paths.index_path)
    return report


def refresh_vectors(
    paths: StorePaths, embedder: Embedder, *, limit: int | None = None, progress: Progress | None = None
) -> SyncReport:
    """Bring the vectors up to date with the projection as the last sync left it, without checking the
    record files again: for a process that has just synced without the model. A projection that is
    missing or unusable by now gets a full sync. With `limit`, at most `limit` texts are embedded: the
    matrix covers what has vectors, and when texts are left the report's `pending` counts them and its
    `vector_failure` is `vector_projection_incomplete`."""
    with projection_lock(paths):
        engine, rebuilt = _open_for_writing(paths.index_path)
        try:
            sync = _Sync(engine, paths, record_scope(paths), embedder, progress, embed_limit=limit)
            report = sync.refresh() if not rebuilt else sync.run(scan_files(paths))
            report.rebuilt = rebuilt
        finally:
            engine.dispose()
        pj.give_back_space_of(paths.index_path)
        return report


def reindex_store(
    paths: StorePaths, embedder: Embedder | None = None, *, progress: Progress | None = None
) -> SyncReport:
    """Build a new projection from every record beside the live one, then rename it over.

    Vectors of unchanged embedding texts are carried over from the live projection when it is
    readable and was made with the same model. On failure the live projection stays as it was.
    A PostgreSQL store's projection is rebuilt in its database (`engines.postgresql.upkeep.reindex`).
    """
    from ..engines.projection import database_variable

    if database_variable(paths) is not None:
        from ..engines.postgresql.upkeep import reindex

        return reindex(paths, embedder, progress)
    scope = record_scope(paths)
    with projection_lock(paths):
        files = scan_files(paths)
        live = paths.index_path
        temp = live.with_name(f".{live.name}.{os.getpid()}.reindex.tmp")
        _remove_database(temp)
        layout: vector_files.Layout | None = None
        try:
            engine = pj.engine_for(temp, create=True)
            try:
                with engine.begin() as conn:
                    pj.create_schema(conn)
                sync = _Sync(engine, paths, scope, embedder, progress, carry_vectors_from=live, matrix_path=live)
                report = sync.run(files)
                layout = sync.layout
                with engine.connect() as conn:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                engine.dispose()
            _remove_sidecars(live)
            os.replace(temp, live)
            fsync_directory(live.parent)
        except BaseException:
            _remove_database(temp)
            if layout is not None:  # a rebuilt matrix is one segment of this run's own token
                for path in layout.paths(live):
                    path.unlink(missing_ok=True)
            raise
        vector_files.remove_except(live, layout)
        report.rebuilt = True
        return report


class FileList:
    """Store-relative path → (size, mtime_ns, inode) of the record files, with their digest kept as
    the files change: the sum, modulo 2**128, of each file's blake2b digest of its path and stat. The
    sum does not depend on the order the files were listed in, so a write moves it on by its own
    files alone, and a process that scanned the store compares one value with what the last sync
    stored (`pj.FILES`)."""

    def __init__(self, stats: dict[str, Stat]) -> None:
        self.stats = stats
        self._sum = sum(map(_file_term, stats.items())) % _DIGEST_MODULUS

    def set(self, path: str, stat: Stat | None) -> None:
        """Note the stat of `path` now (None: there is no such record file)."""
        old = self.stats.pop(path, None)
        if old is not None:
            self._sum -= _file_term((path, old))
        if stat is not None:
            self.stats[path] = stat
            self._sum += _file_term((path, stat))
        self._sum %= _DIGEST_MODULUS

    def fingerprint(self) -> str:
        return f"{len(self.stats)}-{self._sum:032x}"


_DIGEST_MODULUS = 1 << 128


def _file_term(item: tuple[str, Stat]) -> int:
    """One file's part of the digest. `marshal` (fast; its format may change with the Python version,
    which then costs one full check) in its version 2, whose bytes do not depend on how many
    references each value has (later versions mark shared objects)."""
    return int.from_bytes(hashlib.blake2b(marshal.dumps(item, 2), digest_size=16).digest(), "little")


def files_fingerprint(files: dict[str, Stat]) -> str:
    """The digest of these files, as `FileList` keeps it."""
    return FileList(files).fingerprint()


def current_report(
    paths: StorePaths,
    files: dict[str, Stat],
    embedder: Embedder | None,
    fingerprint: str,
    conn: sqlite3.Connection | None = None,
) -> SyncReport | None:
    """The report of a sync with nothing to do, or None when there may be work (or any doubt).

    Nothing to do means: the files have exactly the metadata the last sync stored (one digest
    compared, not a row per file), the files a write stored too recently to trust their metadata
    still have the content it wrote (`_verified`), and, given an embedder, the vectors are current.
    Only the driver's connection is used (`conn`, a writer's, when given; it is left open), so a
    one-shot process reads without importing SQLAlchemy.
    """
    index_path = paths.index_path
    if conn is None and not index_path.is_file():
        return None
    try:
        own = conn is None
        conn = conn or pj.connect(index_path, writer=True)
    except sqlite3.Error:
        return None
    try:
        conn.execute("BEGIN IMMEDIATE")
        pj.check_version(conn)
        settings = pj.get_settings(conn)
        started = time.time_ns()
        if settings.get(pj.FILES) != fingerprint:
            return None
        hashed = _verified(conn, paths, files, settings, started)
        if hashed is None:
            return None
        if embedder is not None and not _vectors_complete(settings, index_path, embedder):
            return None
        report = SyncReport(skipped=_record_count(conn), invalid_files=invalid_files(conn), hashed=hashed)
        pj.set_settings(conn, {pj.LAST_SYNC: _now_millis(), pj.SYNC_STARTED_NS: str(started)})
        conn.execute("COMMIT")
        return report
    except (sqlite3.Error, pj.ProjectionUnusable):
        return None
    finally:
        if own:
            conn.close()  # without COMMIT, the transaction is rolled back
        elif conn.in_transaction:
            conn.rollback()


def _verified(
    conn: sqlite3.Connection, paths: StorePaths, files: dict[str, Stat], settings: dict[str, str], started: int
) -> int | None:
    """How many files were hashed to see that every file stored with a too recent stat (`pj.VERIFY`)
    still has the content it had (a same-size edit within the file system's timestamp granularity
    keeps the stat); None when one changed. Files whose stat is now old enough to trust are dropped
    from the list."""
    pending: dict[str, str] = json.loads(settings.get(pj.VERIFY) or "{}")
    if not pending:
        return 0
    for path, sha256 in pending.items():
        try:
            data = (paths.root / path).read_bytes()
        except OSError:
            return None
        if hashlib.sha256(data).hexdigest() != sha256:
            return None
    settled = started - RACY_WINDOW_NS
    still = {path: sha for path, sha in pending.items() if path in files and files[path][1] >= settled}
    pj.set_settings(conn, {pj.VERIFY: json.dumps(still)})
    return len(pending)


def _stored_stats(conn: sqlite3.Connection) -> dict[str, Stat]:
    """Path → (size, mtime_ns, inode) of every file the projection knows, valid or not."""
    rows = conn.execute("SELECT path, size, mtime_ns, inode FROM records "
                        "UNION ALL SELECT path, size, mtime_ns, inode FROM invalid_files")  # fmt: skip
    return {path: (size, mtime_ns, inode) for path, size, mtime_ns, inode in rows}


def _distrust_recent_writes(conn: sqlite3.Connection) -> None:
    """Smudge the stored size of the files a write listed for verification, so that this sync hashes
    them; the list is then empty."""
    pending = json.loads(pj.get_setting(conn, pj.VERIFY) or "{}")
    if pending:
        conn.executemany("UPDATE records SET size = ? WHERE path = ?", [(SMUDGED, path) for path in pending])
        pj.set_settings(conn, {pj.VERIFY: "{}"})


def _record_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])


def invalid_files(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(name under records/, reason) of every invalid file the projection knows, by name."""
    rows = conn.execute("SELECT path, message FROM invalid_files ORDER BY path")
    return [(path.removeprefix("records/"), message) for path, message in rows]


def vectors_current(paths: StorePaths, embedder: Embedder) -> bool:
    """Whether the store's projection holds current vectors of every chunk for this model (read only)."""
    stored = pj.stored_settings(paths)
    if stored is None:
        return False
    return _vectors_complete(stored[1], stored[0], embedder)


def _vectors_complete(settings: dict[str, str], index_path: Path, embedder: Embedder) -> bool:
    return (
        settings.get(pj.VECTOR_MODEL) == pj.model_identity(embedder)
        and not pj.pending_vectors(settings)
        and current_layout(settings, index_path) is not None
    )


def current_layout(settings: dict[str, str], index_path: Path) -> vector_files.Layout | None:
    """The layout of the vector matrix files when they describe the projection's current generation
    and all exist."""
    layout = vector_files.Layout.current(settings)
    return layout if layout is not None and all(path.is_file() for path in layout.paths(index_path)) else None


def _open_for_writing(path: Path) -> tuple[Engine, bool]:
    """An engine on a usable projection; a missing or unusable one is replaced by an empty one."""
    from sqlalchemy.exc import DBAPIError

    if path.exists() and not path.is_file():
        raise IndexUnavailable(pj.UNAVAILABLE_MESSAGE)
    rebuilt = not path.exists()
    if not rebuilt:
        engine = pj.engine_for(path, create=False)
        try:
            with engine.begin() as conn:
                pj.check_version(pj.driver_connection(conn))
            return engine, False
        except (DBAPIError, pj.ProjectionUnusable):
            engine.dispose()
            rebuilt = True
            try:
                _remove_database(path)
            except OSError as exc:
                raise IndexUnavailable(pj.UNAVAILABLE_MESSAGE) from exc
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = pj.engine_for(path, create=True)
        with engine.begin() as conn:
            pj.create_schema(conn)
    except (OSError, DBAPIError) as exc:
        raise IndexUnavailable(pj.UNAVAILABLE_MESSAGE) from exc
    vector_files.remove_except(path, None)
    return engine, rebuilt


def _remove_sidecars(path: Path) -> None:
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def _remove_database(path: Path) -> None:
    path.unlink(missing_ok=True)
    _remove_sidecars(path)


@dataclass
class _Planned:
    """What this sync does with one file it read (or found displaced by a duplicate id)."""

    stat: FileStat
    record_id: str | None = None
    record: Record | None = None  # set when the file must be (re)projected
    sha256: str | None = None
    invalid: str | None = None
    restat: bool = False  # content unchanged, metadata changed


@dataclass
class _Plan:
    items: list[_Planned]  # files read this time, and unchanged files displaced as duplicates
    unchanged: dict[str, str]  # path → record id of valid files whose metadata did not change
    cached_invalid: dict[str, tuple[int, int, int, str]]  # path → stored size, mtime, inode, reason
    stored: dict[str, str]  # path → record id of every projected record


class _Sync:
    def __init__(
        self,
        engine: Engine,
        paths: StorePaths,
        scope: str,
        embedder: Embedder | None,
        progress: Progress | None,
        *,
        carry_vectors_from: Path | None = None,
        matrix_path: Path | None = None,
        embed_limit: int | None = None,
        defer: bool = False,
    ) -> None:
        self.engine = engine
        self.paths = paths
        self.scope = scope
        self.embedder = embedder
        self.progress = progress or (lambda _phase, _done, _total, _report: None)
        self.carry_vectors_from = carry_vectors_from
        self.matrix_path = matrix_path or paths.index_path
        self.embed_limit = embed_limit
        self.defer = defer
        self.report = SyncReport()
        self.layout: vector_files.Layout | None = None
        self._count_tokens: Callable[[str], int] | None = None

    def run(self, files: dict[str, Stat]) -> SyncReport:
        started = time.time_ns()
        with self.engine.begin() as conn:
            raw = pj.driver_connection(conn)
            _distrust_recent_writes(raw)
            if not self._unchanged(raw, files, started):
                self._apply(conn, self._plan(conn, files), started)
            fingerprint = files_fingerprint(files) if _stored_stats(raw) == files else None
            pj.set_settings(raw, {pj.FILES: fingerprint or ""})
        return self.refresh()

    def refresh(self) -> SyncReport:
        """Bring the vectors up to date with the projection, given an embedder."""
        if self.embedder is not None:
            from ..embedding.errors import EmbeddingFailed

            try:
                self._refresh_vectors()
            except (ValueError, EmbeddingFailed):
                self.report.vector_failure = "embedding_execution_failed"
            else:
                if self.report.pending:
                    self.report.vector_failure = "vector_projection_incomplete"
        return self.report

    # -- planning --------------------------------------------------------------------------

    def _unchanged(self, conn: sqlite3.Connection, files: dict[str, Stat], started: int) -> bool:
        """When every file has the metadata the projection recorded, only note the sync."""
        if _stored_stats(conn) != files:
            return False
        self.report.skipped = _record_count(conn)
        self.report.invalid_files = invalid_files(conn)
        pj.set_settings(conn, {pj.LAST_SYNC: _now_millis(), pj.SYNC_STARTED_NS: str(started)})
        return True

    def _plan(self, conn: Connection, files: dict[str, Stat]) -> _Plan:
        """Read the files whose metadata changed; settle duplicate ids by path order (first wins)."""
        cursor = pj.driver_connection(conn).cursor()
        try:
            rows = {row[0]: row for row in cursor.execute(
                "SELECT path, id, size, mtime_ns, inode, content_sha256 FROM records")}  # fmt: skip
            invalid_rows = {row[0]: row[1:] for row in cursor.execute(
                "SELECT path, size, mtime_ns, inode, message FROM invalid_files")}  # fmt: skip
        finally:
            cursor.close()
        plan = _Plan([], {}, {}, {path: row[1] for path, row in rows.items()})
        changed = []
        for path, stat in files.items():
            row = rows.get(path)
            if row is not None and row[2:5] == stat:
                plan.unchanged[path] = row[1]
            elif path in invalid_rows and invalid_rows[path][:3] == stat:
                plan.cached_invalid[path] = invalid_rows[path]
            else:
                changed.append(path)
        changed.sort()
        for done, path in enumerate(changed, 1):
            plan.items.append(self._plan_file(FileStat(path, *files[path]), rows.get(path)))
            if done % 500 == 0 or done == len(changed):
                self.progress("scanning", done, len(changed), self.report)
        first = {record_id: path for path, record_id in plan.unchanged.items()}
        for item in list(plan.items):  # in path order
            record_id, path = item.record_id, item.stat.path
            if record_id is None:
                continue
            holder = first.get(record_id)
            if holder is not None and holder < path:
                item.invalid, item.record = f"{DUPLICATE} {_name(holder)}", None
                continue
            if holder is not None:  # an unchanged file later in path order held the id: it is the duplicate
                del plan.unchanged[holder]
                plan.items.append(_Planned(FileStat(holder, *files[holder]), record_id,
                                           invalid=f"{DUPLICATE} {_name(path)}"))  # fmt: skip
            first[record_id] = path
        return plan

    def _plan_file(self, stat: FileStat, row: tuple[Any, ...] | None) -> _Planned:
        """Hash a file whose metadata changed; parse it when its content changed too."""
        try:
            data = (self.paths.root / stat.path).read_bytes()
        except OSError as exc:
            return _Planned(stat, invalid=f"could not be read ({exc.strerror or type(exc).__name__})")
        self.report.hashed += 1
        digest = hashlib.sha256(data).hexdigest()
        if row is not None and row[5] == digest:
            return _Planned(stat, record_id=row[1], sha256=digest, restat=True)
        try:
            record = parse_markdown(data, _name(stat.path))
        except RecordError as exc:
            return _Planned(stat, invalid=exc.detail)
        if record.scope != self.scope:
            return _Planned(stat, invalid=OUTSIDE_SCOPE)
        return _Planned(stat, record_id=record.id, record=record, sha256=digest)

    # -- applying --------------------------------------------------------------------------

    def _apply(self, conn: Connection, plan: _Plan, started: int) -> None:
        """Write the plan in one transaction."""
        from sqlalchemy import delete, update

        t = pj.tables()
        racy_after = started - RACY_WINDOW_NS
        valid = [item for item in plan.items if item.invalid is None]
        kept = {item.record_id for item in valid}
        gone = [record_id for path, record_id in plan.stored.items()
                if path not in plan.unchanged and record_id not in kept]  # fmt: skip
        reprojected = [item for item in valid if item.record is not None]
        self.report.skipped = len(plan.unchanged) + len(valid) - len(reprojected)
        invalid = [(item.stat.path, item.invalid) for item in plan.items if item.invalid is not None]
        invalid += [(path, row[3]) for path, row in plan.cached_invalid.items()]
        self.report.invalid_files = [(path.removeprefix("records/"), reason) for path, reason in sorted(invalid)]
        for batch in _batches(gone):
            conn.execute(delete(t.records).where(t.records.c.id.in_(batch)))
        self.report.removed = len(gone)
        for item in valid:
            if item.restat:
                conn.execute(update(t.records).where(t.records.c.id == item.record_id)
                             .values(_stat_dict(item.stat)))  # fmt: skip
        for batch in _batches(reprojected):
            self._project(conn, batch)
            self.report.indexed += len(batch)
            self.progress("indexing", self.report.indexed, len(reprojected), self.report)
        conn.execute(delete(t.invalid_files))
        invalid_rows = [
            {"path": item.stat.path, "message": item.invalid, **_stat_values(item.stat, racy_after)}
            for item in plan.items
            if item.invalid is not None and not item.invalid.startswith(DUPLICATE)
        ]
        invalid_rows += [
            {"path": path, "size": size, "mtime_ns": mtime_ns, "inode": inode, "message": message}
            for path, (size, mtime_ns, inode, message) in plan.cached_invalid.items()
        ]
        if invalid_rows:
            conn.execute(t.invalid_files.insert(), invalid_rows)
        settings = {pj.LAST_SYNC: _now_millis(), pj.SYNC_STARTED_NS: str(started)}
        postings.apply_changes(pj.driver_connection(conn))
        if gone or reprojected:
            settings[pj.GENERATION] = str(int(pj.get_setting(pj.driver_connection(conn), pj.GENERATION) or 0) + 1)
        # A valid file stored with a stat too recent to trust is hashed by the next check (`_verified`).
        settings[pj.VERIFY] = json.dumps({item.stat.path: item.sha256 for item in valid
                                          if item.stat.mtime_ns >= racy_after and item.sha256 is not None})  # fmt: skip
        pj.set_settings(pj.driver_connection(conn), settings)

    def _project(self, conn: Connection, batch: list[_Planned]) -> None:
        """Replace the rows of these records (by id and by path) and chunk their bodies."""
        projected = []
        for item in batch:
            assert item.record is not None and item.sha256 is not None
            projected.append((item.stat.path, item.record, item.sha256, _stat_dict(item.stat)))
        self.report.chunks += project_records(pj.driver_connection(conn), projected, self._token_counter())

    def _token_counter(self) -> Callable[[str], int]:
        if self._count_tokens is None:
            self._count_tokens = token_counter(self.paths, self.embedder)
        return self._count_tokens

    # -- vectors ---------------------------------------------------------------------------

    def _refresh_vectors(self) -> None:
        from sqlalchemy import delete, func, select

        embedder = self.embedder
        assert embedder is not None
        t = pj.tables()
        model = pj.model_identity(embedder)
        with self.engine.begin() as conn:
            settings = pj.get_settings(pj.driver_connection(conn))
            same_model = settings.get(pj.VECTOR_MODEL) == model
            self.layout = current_layout(settings, self.matrix_path) if same_model else None
            if self.layout is not None and not pj.pending_vectors(settings):
                return
            if not same_model:
                conn.execute(delete(t.vectors))
            if self.carry_vectors_from is not None:
                self._carry_vectors(conn, model)
            previous = self._previous_matrix(settings) if same_model else None
            # Chunks up to a complete previous matrix's last one had vectors then; ids are never reused.
            complete = previous is not None and previous.size > 0 and not pj.pending_vectors(settings)
            newer_than = int(previous.rows["chunk"][-1]) if previous is not None and complete else -1
            # Only the hashes are held, shortest text first (similar lengths share a batch: less
            # padding; a small record's texts come before a large one's); each batch's texts are read
            # when it is embedded.
            missing = [
                embed_hash
                for (embed_hash,) in conn.execute(
                    select(t.chunks.c.embed_hash)
                    .outerjoin(t.vectors, t.vectors.c.embed_hash == t.chunks.c.embed_hash)
                    .where(t.chunks.c.id > newer_than, t.chunks.c.ordinal < VECTOR_CHUNKS,
                           t.vectors.c.embed_hash.is_(None))
                    .group_by(t.chunks.c.embed_hash)
                    .order_by(func.min(func.length(t.chunks.c.embed_text)), t.chunks.c.embed_hash)
                )
            ]  # fmt: skip
        if self.embed_limit is not None and len(missing) > self.embed_limit:
            kept = 0 if self.defer else self.embed_limit
            missing, self.report.pending = missing[:kept], len(missing) - kept
        if self.layout is not None and not missing:  # nothing to embed now: the matrix covers what there is
            if settings.get(pj.VECTOR_PENDING) != str(self.report.pending):
                with self.engine.begin() as conn:
                    pj.set_settings(pj.driver_connection(conn), {pj.VECTOR_PENDING: str(self.report.pending)})
            return
        for start in range(0, len(missing), EMBED_BATCH):
            batch = missing[start : start + EMBED_BATCH]
            with self.engine.connect() as conn:
                texts = {embed_hash: (embed_text, text) for embed_hash, embed_text, text in conn.execute(
                    select(t.chunks.c.embed_hash, t.chunks.c.embed_text, t.chunks.c.text)
                    .where(t.chunks.c.embed_hash.in_(batch))
                )}  # fmt: skip
            matrix, sentence_vectors = _chunk_vectors(embedder, [texts[embed_hash] for embed_hash in batch])
            with self.engine.begin() as conn:
                conn.execute(t.vectors.insert(), [
                    {"embed_hash": embed_hash, "model_version": embedder.model_version,
                     "vector": vector.astype("<f4").tobytes(), "sentence_vectors": sentences}
                    for embed_hash, vector, sentences in zip(batch, matrix, sentence_vectors, strict=True)
                ])  # fmt: skip
            self.report.embedded += len(batch)
            self.progress("embedding", self.report.embedded, len(missing), self.report)
        with self.engine.begin() as conn:
            released = select(t.released.c.embed_hash)
            still_used = select(t.chunks.c.embed_hash).where(t.chunks.c.embed_hash.in_(released))
            conn.execute(delete(t.vectors).where(t.vectors.c.embed_hash.in_(released),
                                                 t.vectors.c.embed_hash.not_in(still_used)))  # fmt: skip
            conn.execute(delete(t.released))
            settings = pj.get_settings(pj.driver_connection(conn))
            token = f"{settings[pj.PROJECTION_ID]}-{settings[pj.GENERATION]}"
            if previous is not None and settings.get(pj.VECTOR_GENERATION) == settings[pj.GENERATION]:
                # more vectors for the same generation (a backlog's step): a name of their own
                (count,) = pj.driver_connection(conn).execute("SELECT count(*) FROM vectors").fetchone()
                token = f"{token}.{count}"
            self.layout = self._write_matrix(conn, embedder.dimension, token, previous)
            pj.set_settings(pj.driver_connection(conn), {
                pj.VECTOR_GENERATION: settings[pj.GENERATION],
                pj.VECTOR_MODEL: model,
                pj.VECTOR_FILES: self.layout.dumps(),
                pj.VECTOR_PENDING: str(self.report.pending),
            })  # fmt: skip
        if self.carry_vectors_from is None:
            vector_files.remove_except(self.matrix_path, self.layout)

    def _previous_matrix(self, settings: dict[str, str]) -> vector_files.Matrix | None:
        """The last matrix written for this projection, whatever generation it describes."""
        if pj.VECTOR_FILES not in settings:
            return None
        return vector_files.load(self.matrix_path, vector_files.Layout.parse(settings[pj.VECTOR_FILES]))

    def _carry_vectors(self, conn: Connection, model: str) -> None:
        """Copy vectors the new projection needs from the live one, when it used the same model."""
        from sqlalchemy.exc import DBAPIError

        source = self.carry_vectors_from
        if source is None or not source.is_file():
            return
        try:
            with pj.reading(source) as old:
                if pj.get_setting(old, pj.VECTOR_MODEL) != model:
                    return
            conn.exec_driver_sql("ATTACH DATABASE ? AS previous", (f"file:{source}?mode=ro",))
            try:
                conn.exec_driver_sql(
                    "INSERT OR IGNORE INTO vectors SELECT p.embed_hash, p.model_version, p.vector, p.sentence_vectors "
                    "FROM previous.vectors AS p WHERE p.embed_hash IN (SELECT embed_hash FROM chunks)"
                )
            finally:
                conn.exec_driver_sql("DETACH DATABASE previous")
        except (IndexUnavailable, DBAPIError):
            return

    def _write_matrix(self, conn: Connection, dimension: int, token: str, previous: vector_files.Matrix | None
                      ) -> vector_files.Layout:  # fmt: skip
        """Write the matrix files for every chunk as generation `token`; returns their layout.

        Chunk ids are never reused, so a chunk found in the previous matrix (same projection and
        model) keeps its row's vector; only newer chunks' vectors are read from SQLite. When the
        previous matrix is recent enough, only those newer vectors are written, as a new segment.
        Vectors are copied a block at a time, so the writer's memory does not grow with the store.
        """
        cursor = pj.driver_connection(conn).cursor()
        try:
            rows, scopes = _matrix_rows(cursor)
            if previous is not None and not (previous.size and previous.segments[0].shape[1] == dimension):
                previous = None
            newer_than = int(previous.rows["chunk"][-1]) if previous is not None else -1
            (newer,) = cursor.execute(_NEWER_VECTORS.format(columns="count(*)"), (newer_than,)).fetchone()
        finally:
            cursor.close()
        if previous is not None:
            appended = _appended_rows(previous, rows, newer)
            if appended is not None:
                layout = vector_files.Layout(
                    token, tuple(scopes), previous.layout.segments + ((token,) if newer else ())
                )
                segment = (
                    vector_files.Segment(newer, dimension, _blocks(conn, newer_than, dimension)) if newer else None
                )
                vector_files.write(self.matrix_path, layout, appended, segment)
                return layout
            position, known = previous.rows_of(rows["chunk"])
            if newer != int((~known).sum()):  # it does not fit: build from SQLite alone
                return self._write_matrix(conn, dimension, token, None)
            blocks = _merged_blocks(previous, position, known, _blocks(conn, newer_than, dimension))
        else:
            blocks = _blocks(conn, newer_than, dimension)  # (a chunk without a vector fails the write: ValueError)
        layout = vector_files.Layout(token, tuple(scopes), (token,))
        vector_files.write(self.matrix_path, layout, rows, vector_files.Segment(rows.size, dimension, blocks))
        return layout


def _chunk_vectors(embedder: Embedder, texts: list[tuple[str, str]]) -> tuple[np.ndarray, list[bytes | None]]:
    """For each (embedding text, chunk text): the embedding text's vector, and the float32 vectors of
    the chunk's sentences (`chunking.own_sentences`) as one blob, None when it has none.

    A model that pools spans (`Embedder.embed_spans`) reads every sentence in the same pass as its
    chunk; otherwise each sentence is embedded again on its own.
    """
    embed_spans = getattr(embedder, "embed_spans", None)
    offsets = [len(embed_text) - len(text) for embed_text, text in texts]
    if embed_spans is None or not all(embed_text.endswith(text) for embed_text, text in texts):
        matrix = embedder.embed([embed_text for embed_text, _text in texts])
        return matrix, _sentence_vectors(embedder, [text for _embed_text, text in texts])
    spans = []
    for (_embed_text, text), offset in zip(texts, offsets, strict=True):
        own = sentence_spans(text)
        spans.append([(offset + start, offset + end) for start, end in own] if len(own) > 1 else [])
    matrix, pooled = embed_spans([embed_text for embed_text, _text in texts], spans)
    return matrix, [vectors.astype("<f4").tobytes() if len(vectors) else None for vectors in pooled]


def _sentence_vectors(embedder: Embedder, texts: list[str]) -> list[bytes | None]:
    """For each chunk text, the float32 vectors of its sentences (`chunking.own_sentences`), each
    embedded on its own, as one blob; None when it has none."""
    import numpy as np

    cuts = [own_sentences(text) for text in texts]
    pieces = [piece for cut in cuts for piece in cut]
    if not pieces:
        return [None] * len(texts)
    order = sorted(range(len(pieces)), key=lambda position: len(pieces[position]))  # similar lengths share a batch
    vectors = np.empty((len(pieces), embedder.dimension), dtype="<f4")
    for start in range(0, len(order), EMBED_BATCH):
        batch = order[start : start + EMBED_BATCH]
        vectors[batch] = embedder.embed([pieces[position] for position in batch])
    ends = np.cumsum([len(cut) for cut in cuts]).tolist()
    return [vectors[end - len(cut) : end].tobytes() if cut else None for cut, end in zip(cuts, ends, strict=True)]


MATRIX_BLOCK_ROWS = 4096  # vectors copied at a time while a matrix file is written
_NEWER_VECTORS = "SELECT {columns} FROM chunks AS c JOIN vectors AS v ON v.embed_hash = c.embed_hash WHERE c.id > ?"


def _blocks(conn: Connection, newer_than: int, dimension: int) -> Iterator[np.ndarray]:
    """The vectors of the chunks after `newer_than`, in chunk order, `MATRIX_BLOCK_ROWS` at a time."""
    import numpy as np

    cursor = pj.driver_connection(conn).cursor()
    try:
        cursor.execute(_NEWER_VECTORS.format(columns="v.vector") + " ORDER BY c.id", (newer_than,))
        while batch := cursor.fetchmany(MATRIX_BLOCK_ROWS):
            yield np.frombuffer(b"".join(blob for (blob,) in batch), dtype="<f4").reshape(len(batch), dimension)
    finally:
        cursor.close()


def _merged_blocks(
    previous: vector_files.Matrix, position: np.ndarray, known: np.ndarray, newer: Iterator[np.ndarray]
) -> Iterator[np.ndarray]:
    """Every chunk's vector in chunk order, a block at a time: from the previous matrix where `known`
    (at `position`), else the next ones of `newer`."""
    import numpy as np

    pending = np.empty((0, previous.segments[0].shape[1]), dtype=np.float32)
    for start in range(0, known.size, MATRIX_BLOCK_ROWS):
        found = known[start : start + MATRIX_BLOCK_ROWS]
        block = np.empty((found.size, pending.shape[1]), dtype=np.float32)
        if found.any():
            block[found] = previous.vectors(position[start : start + MATRIX_BLOCK_ROWS][found])
        missing = int(found.size - found.sum())
        while pending.shape[0] < missing:
            more = next(newer, None)
            if more is None:
                raise ValueError("a chunk has no vector")
            pending = np.concatenate([pending, more])
        block[~found], pending = pending[:missing], pending[missing:]
        yield block


def _matrix_rows(cursor: sqlite3.Cursor) -> tuple[np.ndarray, list[str]]:
    """The matrix row of every chunk, in chunk order, and the scope names their scope codes refer to.
    A record's number is its position among the records by rowid."""
    import numpy as np

    records = cursor.execute("SELECT rowid, scope, status, access, kind FROM records ORDER BY rowid").fetchall()
    scopes = sorted({row[1] for row in records})
    codes = vector_files.code_tables(scopes)
    rowids = np.array([row[0] for row in records], dtype=np.int64)
    record_codes = np.array(
        [(codes.scope[scope], codes.status[status], codes.access[access], codes.kind[kind])
         for _, scope, status, access, kind in records], dtype=np.int16,
    ).reshape(len(records), 4)  # fmt: skip
    # Records first (CROSS JOIN keeps that order): then every lookup stays in the two tables' small
    # indexes instead of reading the wide chunk rows. Sorted by chunk id below. Only chunks with a
    # vector have a row (past the vector cap, or still waiting, a chunk is found lexically only).
    chunks = np.array(cursor.execute(
        "SELECT c.id, r.rowid FROM records AS r CROSS JOIN chunks AS c ON c.record_id = r.id "
        "WHERE EXISTS (SELECT 1 FROM vectors AS v WHERE v.embed_hash = c.embed_hash)").fetchall(),
        dtype=np.int64).reshape(-1, 2)  # fmt: skip
    chunks = chunks[np.argsort(chunks[:, 0])]
    numbers = np.searchsorted(rowids, chunks[:, 1])
    rows = np.empty(len(chunks), dtype=vector_files.ROW_DTYPE)
    rows["chunk"], rows["record"] = chunks[:, 0], numbers
    for column, name in enumerate(("scope", "status", "access", "kind")):
        rows[name] = record_codes[numbers, column]
    return rows, scopes


def _appended_rows(previous: vector_files.Matrix, rows: np.ndarray, newer: int) -> np.ndarray | None:
    """The rows file for the previous matrix's segments plus one segment of the `newer` chunks after
    its last one; None when the previous matrix does not fit or the result should be laid out afresh.

    Every previous row whose chunk is gone turns dead; the others take their record's current codes.
    """
    import numpy as np

    kept = rows.size - newer  # rows are in chunk order, so the newer chunks come last
    position, found = previous.rows_of(rows["chunk"][:kept])
    if not found.all() or np.any(previous.rows["status"][position] == vector_files.DEAD):
        return None
    total = previous.size + newer
    segments = len(previous.layout.segments) + (1 if newer else 0)
    if total - rows.size > vector_files.MAX_DEAD_SHARE * total or segments > vector_files.MAX_SEGMENTS:
        return None
    appended = np.empty(total, dtype=vector_files.ROW_DTYPE)
    appended[: previous.size] = previous.rows
    appended["status"][: previous.size] = vector_files.DEAD
    appended["record"][: previous.size] = -1
    appended[position] = rows[:kept]
    appended[previous.size :] = rows[kept:]
    return appended


def token_counter(paths: StorePaths, embedder: Embedder | None = None) -> Callable[[str], int]:
    """The model's tokenizer (from the embedder, else loaded once), or the conservative estimate."""
    if embedder is not None:
        return embedder.token_count
    from ..embedding import EmbedderInitError, ModelUnavailable

    try:
        return _tokenizer(paths.cache_dir).token_count
    except (ModelUnavailable, EmbedderInitError):
        return approximate_token_count


def project_records(
    conn: sqlite3.Connection, records: list[tuple[str, Record, str, dict[str, int]]], count: Callable[[str], int]
) -> int:
    """Replace the rows of these records (by id and by path) and chunk their bodies, inside the caller's
    transaction on the driver's connection (a write projects what it wrote without SQLAlchemy). Each
    item: store-relative path, record, sha256 of the file, stored stat values. A record still at the
    same path with the same title, aliases and tags keeps the chunk rows that did not change
    (`kept_chunks`). Returns the chunks these records now have."""
    record_rows = [
        (record.id, record.scope, path, record.title, normalize(record.title), record.kind, record.status,
         record.access, record.created_at.render(), record.updated_at.render(), _json(list(record.tags)),
         _json(list(record.aliases)), _json([source.to_json() for source in record.sources]), sha256,
         stat["size"], stat["mtime_ns"], stat["inode"])
        for path, record, sha256, stat in records
    ]  # fmt: skip
    marks = ", ".join("?" * len(records))
    stored = set(conn.execute(f"SELECT id, path, title, aliases, tags FROM records WHERE id IN ({marks})",
                              [row[0] for row in record_rows]))  # fmt: skip
    same = {row[0] for row in record_rows if (row[0], row[2], row[3], row[11], row[10]) in stored}
    others = [row for row in record_rows if row[0] not in same]  # replaced whole, chunks and all
    if others:
        marks = ", ".join("?" * len(others))
        conn.execute(f"DELETE FROM records WHERE id IN ({marks}) OR path IN ({marks})",
                     [row[0] for row in others] + [row[2] for row in others])  # fmt: skip
    written = 0
    for (path, record, _sha256, _stat), row in zip(records, record_rows, strict=True):
        chunks = record_chunks(record, path, count)
        written += len(chunks)
        if row[0] in same:
            conn.execute(_UPDATE_RECORD, (*row[1:], row[0]))
            kept_chunks.replace(conn, record.id, chunks)
        else:
            conn.execute(_INSERT_RECORD, row)
            kept_chunks.insert(conn, chunks)
    return written


_RECORD_COLUMNS = ("id", "scope", "path", "title", "title_key", "kind", "status", "access", "created_at", "updated_at",
                   "tags", "aliases", "sources", "content_sha256", "size", "mtime_ns", "inode")  # fmt: skip
_INSERT_RECORD = f"INSERT INTO records({', '.join(_RECORD_COLUMNS)}) VALUES ({', '.join('?' * len(_RECORD_COLUMNS))})"
_UPDATE_RECORD = f"UPDATE records SET {', '.join(f'{name} = ?' for name in _RECORD_COLUMNS[1:])} WHERE id = ?"


ChunkValues = tuple[str, int, str | None, str, str, str, int, int, str]


def record_chunks(record: Record, path: str, count: Callable[[str], int]) -> list[ChunkValues]:
    """The chunks of a record at store-relative `path`, each as (record id, ordinal, heading, text, embedding
    text, retrieval text, model tokens, words, sha256 of the embedding text): what every projection stores.
    Past the vector cap a chunk is never embedded: its embedding text is left empty (its hash is still
    that of the text it would have) and its token count is 0."""
    prefix = retrieval_prefix(record, _name(path))
    counted = functools.cache(count)  # an embedding text was counted when its chunk was fitted
    rows = []
    for chunk in chunk_body(record.title, record.body, count_tokens=counted, exact_chunks=VECTOR_CHUNKS):
        embedded = chunk.ordinal < VECTOR_CHUNKS
        rows.append((
            record.id, chunk.ordinal, chunk.heading, chunk.text, chunk.embed_text if embedded else "",
            prefix(chunk.heading) + chunk.text, counted(chunk.embed_text) if embedded else 0, chunk.word_count,
            hashlib.sha256(chunk.embed_text.encode()).hexdigest(),
        ))  # fmt: skip
    return rows


@functools.lru_cache(maxsize=4)
def _tokenizer(cache_dir: Path) -> TokenCounter:
    """The model's tokenizer, loaded once per process (failures are not cached)."""
    from ..embedding import load_tokenizer

    return load_tokenizer(cache_dir)


def retrieval_prefix(record: Record, file_name: str) -> Callable[[str | None], str]:
    """The lines indexed before each chunk's text: title, heading path, aliases, tags, file name."""
    tail = f"{' '.join(record.aliases)}\n{' '.join(record.tags)}\n{file_name}\n"
    return lambda heading: f"{record.title}\n{heading or ''}\n{tail}"


def _name(store_relative: str) -> str:
    return store_relative.rsplit("/", 1)[-1]


def _stat_dict(stat: FileStat) -> dict[str, int]:
    return {"size": stat.size, "mtime_ns": stat.mtime_ns, "inode": stat.inode}


def _stat_values(stat: FileStat, racy_after: int) -> dict[str, int]:
    """Stored file metadata; a racy file gets a smudged size so that it is hashed again next time."""
    size = SMUDGED if stat.mtime_ns >= racy_after else stat.size
    return {"size": size, "mtime_ns": stat.mtime_ns, "inode": stat.inode}


def _batches(items: list[Any], size: int = 500) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _now_millis() -> str:
    """UTC now as RFC 3339 with milliseconds, e.g. 2026-08-05T20:09:00.123Z."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"

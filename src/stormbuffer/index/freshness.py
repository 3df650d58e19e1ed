"""Knowing, in a long-running process, when a store's projection may be behind its records.

A one-shot process checks every record file on every read (`sync_store`: one stat per file plus
the projection's records table). A long-running process watches instead, one `StoreFreshness`
per store, and runs that full check only when something may have changed:

- A watcher thread on `records/` (recursive; inotify on Linux, FSEvents on macOS, polling where
  neither works) is started before the store's first sync. Every event below it (a file created,
  modified in place, deleted or moved, a directory created later) bumps a change counter, and the
  paths it names are kept (up to `MAX_PATHS`) for the next check.
- That check, a read's or a write's, re-stats only those paths in the list of files kept since the
  last full scan (`watched.WatchedFiles`) and compares the list's digest with the one the last
  sync or write stored; only a difference costs a full scan.
- A sync remembers the counter as it was when the sync started. The store counts as current
  only while the counter has not moved since, so a change that lands during a sync is synced by
  the next read.
- A single change reaches the counter two watcher steps later (`2 * STEP_MS`, 40 ms), a burst of
  changes at most `DEBOUNCE_MS + 2 * STEP_MS` (80 ms) after it began, plus scheduling delay on a
  busy machine: a read within that window after another process's edit can still see the
  projection as it was. Writes made through this process mark the store stale at once. An idle
  watcher costs about 0.2 % of a core.
- When the watcher cannot be trusted, the store is checked in full on every read until a new
  watcher runs: the store is not initialized, the watcher could not start, reported an error or
  stopped, or the records directory itself was moved, removed or replaced. A store on a network
  or shared-folder file system (NFS, SMB, 9p, virtiofs, FUSE, …) gets no watcher at all: other
  machines change files there without local events.
- The projection can change underneath (another process syncs or reindexes; the file is
  deleted). The database and its WAL are stat-ed on every read; when that signature moved, the
  projection's content identity (projection id, generation, vector generation, model and matrix
  files) is read, and the store is synced unless it is what the last sync left. Retrieval caches
  are keyed by that identity, so a replaced projection is read afresh.
- A watcher does not see everything: the kernel's event queue can overflow under a burst of
  file activity (the watcher library does not pass the overflow on), and a shared file system
  may not be recognized as one (only Linux mount tables are read). A full check at least every
  `RECHECK_S` seconds bounds how long such a change stays unseen. A background thread scans the
  files every half of that bound and, when the scan agrees with what the watcher reported, spares
  the next read or write the full scan of a large store.
- A read's sync embeds the texts still without vectors when there are at most `READ_EMBED_LIMIT`
  (a note just added); more are a backlog: it embeds none, starts the store's `Backlog` thread and
  answers at once from what exists.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import IndexBusy, StoreError
from ..core.stores import StorePaths, record_scope
from . import projection as pj
from .backlog import Backlog
from .sync import READ_EMBED_LIMIT, Embedder, SyncReport, projection_lock
from .watched import ProjectionConnection, WatchedFiles

if TYPE_CHECKING:
    from watchfiles._rust_notify import RustNotify

DEBOUNCE_MS = 40  # longest a burst of events is grouped before the counter moves
STEP_MS = 20  # how often the watcher thread looks for events (and for the stop request)
RECHECK_S = 60.0
MIN_VERIFY_S = 1.0  # shortest pause between two background scans
MAX_PATHS = 4096  # changed paths kept between two checks; more → the files are listed afresh
POLL_DELAY_MS = 300  # only where the watcher falls back to polling
MOUNTS = Path("/proc/self/mounts")
SHARED_FILE_SYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "drvfs", "virtiofs", "vboxsf", "vmhgfs", "ceph", "glusterfs",
    "lustre", "gpfs", "afs", "fuse",
})  # fmt: skip

FileSignature = tuple[int, int, int] | None  # inode, size, mtime_ns; None when absent
_IDENTITY_KEYS = (pj.PROJECTION_ID, pj.GENERATION, pj.VECTOR_GENERATION, pj.VECTOR_MODEL, pj.VECTOR_FILES)

logger = logging.getLogger(__name__)


class RecordsWatcher:
    """A thread counting the change events below one records directory.

    The watches are in place when the constructor returns (it raises OSError, or the watcher
    library's RuntimeError, when they cannot be set up). `close` stops the thread; it is a daemon
    thread so that a process that never calls `close` can still exit.
    """

    def __init__(self, directory: Path) -> None:
        from watchfiles._rust_notify import RustNotify

        info = directory.stat()
        self.directory = directory
        self._identity = (info.st_dev, info.st_ino)
        self._root = os.fspath(directory)
        self._notify: RustNotify = RustNotify([self._root], False, False, POLL_DELAY_MS, True, False)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._changes = 0
        self._paths: set[str] | None = set()  # reported since `take_paths` last ran; None: too many
        self._alive = True
        self._thread = threading.Thread(target=self._run, name="stormbuffer-records-watcher", daemon=True)
        self._thread.start()

    @property
    def changes(self) -> int:
        """How many groups of events were seen; any difference means the records may have changed."""
        with self._lock:
            return self._changes

    def trusted(self) -> bool:
        """Whether events still cover the records: the thread runs and the directory is the one watched."""
        with self._lock:
            if not self._alive:
                return False
        try:
            info = self.directory.stat()
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self._identity

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)  # the thread looks for the request every STEP_MS

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                found = self._notify.watch(DEBOUNCE_MS, STEP_MS, 0, self._stop)
                if isinstance(found, set):  # otherwise "stop", or "signal"/"timeout", which never apply here
                    changed = {path for _change, path in found}
                    self._note(changed, retire=self._root in changed)
        except Exception as exc:  # the library reports every watcher failure as an exception
            logger.warning("stopped watching a records directory: %s", type(exc).__name__)
        finally:
            self._note(set(), retire=True)
            self._notify.close()

    def take_paths(self) -> set[str] | None:
        """The paths reported since the last call, which forgets them; None when more than
        `MAX_PATHS` were (or the watcher retired): then the list of files must be made afresh."""
        with self._lock:
            paths, self._paths = self._paths, set()
            return paths if self._alive else None

    def _note(self, paths: set[str], retire: bool) -> None:
        """Count one group of events and keep its paths; `retire` when events no longer cover the
        records (the directory itself was moved or removed, or the thread ends)."""
        with self._lock:
            self._changes += 1
            if self._paths is not None:
                self._paths |= paths
                if len(self._paths) > MAX_PATHS:
                    self._paths = None
            if retire:
                self._alive = False
                self._stop.set()


@dataclass
class _Synced:
    """What the last successful sync left: the basis on which later reads may skip theirs."""

    changes: int  # the watcher's counter when the sync started
    model: str | None  # identity of the model whose vectors it refreshed, if any
    signature: tuple[FileSignature, ...]  # projection files after it
    identity: tuple[str, tuple[str | None, ...]]  # projection path and content identity after it
    at: float  # monotonic seconds


class StoreFreshness:
    """One store's watcher and the state of its last sync; `sync` skips the full check when it can."""

    def __init__(self, paths: StorePaths, *, recheck_s: float = RECHECK_S, clock: Callable[[], float] = time.monotonic,
                 backlog: Backlog | None = None) -> None:  # fmt: skip
        self.paths = paths
        self._recheck_s = recheck_s
        self._clock = clock
        self._projection = pj.index_candidates(paths)
        self._lock = threading.Lock()
        self._watcher: RecordsWatcher | None = None
        self._synced: _Synced | None = None
        self._closed = False
        self.files = WatchedFiles(paths, recheck_s=recheck_s, clock=clock)
        self.write_connection = ProjectionConnection(paths)  # for writes, which hold the mutation lock
        self._read_connection = ProjectionConnection(paths)  # for checks, which hold `_lock`
        self.backlog = backlog or Backlog(paths)
        self._watch()
        self._stopping = threading.Event()
        threading.Thread(target=self._verify_in_background, name="stormbuffer-recheck", daemon=True).start()

    @property
    def watcher(self) -> RecordsWatcher | None:
        """The running watcher, if there is one."""
        return self._watcher

    def sync(self, embedder: Embedder | None) -> SyncReport | None:
        """`sync_store` unless the store is known to be current (None then).

        Exceptions of `sync_store` (IndexBusy, StoreError, IndexUnavailable) pass through and leave
        the store to be checked again next time.
        """
        model = pj.model_identity(embedder) if embedder is not None else None
        with self._lock:
            if self._current(model):
                return None
            watcher = self._watch()
            started = watcher.changes if watcher is not None else None
            self._synced = None
            report = self._check(watcher, embedder)
            if started is not None and report.complete and report.vector_failure is None:
                self._synced = self._after_sync(started, model)
        if report.pending and embedder is not None:
            self.backlog.start(embedder)
        return report

    def current_watcher(self) -> RecordsWatcher | None:
        """The watcher, started (again) when there is none that can be trusted: for a write's check."""
        with self._lock:
            return self._watch()

    def needs_sync(self, embedder: Embedder | None = None) -> bool:
        """Whether the next `sync` would run the full check."""
        model = pj.model_identity(embedder) if embedder is not None else None
        with self._lock:
            return not self._current(model)

    def changed(self) -> None:
        """Records were written by this process: the next read syncs, whatever the watcher saw so far."""
        with self._lock:
            self._synced = None

    def close(self) -> None:
        self._stopping.set()
        self.backlog.close()
        with self._lock:
            self._closed = True
            self._synced = None
            self._read_connection.close()
            self.write_connection.close()
            if self._watcher is not None:
                self._watcher.close()
                self._watcher = None

    def _verify_in_background(self) -> None:
        """Every half of the recheck bound, the kept file list confirmed by a full scan (`WatchedFiles.verify`)."""
        while not self._stopping.wait(max(self._recheck_s / 2, MIN_VERIFY_S)):
            watcher = self._watcher
            if watcher is None or not watcher.trusted():
                continue
            try:
                self.files.verify(watcher)
            except (OSError, StoreError, IndexBusy):
                continue  # left for a check once the bound has passed

    def _current(self, model: str | None) -> bool:
        synced, watcher = self._synced, self._watcher
        if synced is None or watcher is None or watcher.changes != synced.changes:
            return False
        if model is not None and synced.model != model:
            return False
        if self._clock() - synced.at > self._recheck_s or not watcher.trusted():
            return False
        signature = self._signature()
        if signature == synced.signature:
            return True
        if self._identity() != synced.identity:
            return False
        synced.signature = signature  # rewritten with the same content (a checkpoint, another process's no-op sync)
        return True

    def _check(self, watcher: RecordsWatcher | None, embedder: Embedder | None) -> SyncReport:
        """`sync_store`, on the files as the watcher keeps them: only a store whose digest moved is
        scanned in full."""
        scope = record_scope(self.paths)
        with projection_lock(self.paths):
            try:
                conn = self._read_connection.get()
            except sqlite3.Error:
                conn = None
            return self.files.sync(watcher, scope, embedder, conn, embed_limit=READ_EMBED_LIMIT, defer=True)[0]

    def _watch(self) -> RecordsWatcher | None:
        """The running watcher, started (again) when there is none that can be trusted."""
        if self._watcher is not None and self._watcher.trusted():
            return self._watcher
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        if self._closed or not self.paths.records.is_dir() or shared_file_system(self.paths.records):
            return None
        try:
            self._watcher = RecordsWatcher(self.paths.records)
        except (OSError, RuntimeError) as exc:
            logger.warning("records are checked in full on every read: the watcher could not start (%s)",
                           type(exc).__name__)  # fmt: skip
        return self._watcher

    def _after_sync(self, started: int, model: str | None) -> _Synced | None:
        """The state a sync left, when it is complete for `model` (the signature is taken before the
        identity is read, so a later write always moves the signature)."""
        signature = self._signature()
        identity = self._identity()
        if identity is None:
            return None
        settings = dict(zip(_IDENTITY_KEYS, identity[1], strict=True))
        vectors_current = (
            settings[pj.VECTOR_MODEL] == model
            and settings[pj.VECTOR_GENERATION] == settings[pj.GENERATION]
            and settings[pj.VECTOR_FILES] is not None
        )
        if model is not None and not vectors_current:
            return None  # another writer replaced what this sync made; the next read syncs again
        return _Synced(started, model, signature, identity, self._clock())

    def _signature(self) -> tuple[FileSignature, ...]:
        return tuple(_stat(path) for database in self._projection for path in (database, _wal(database)))

    def _identity(self) -> tuple[str, tuple[str | None, ...]] | None:
        stored = pj.stored_settings(self.paths)
        if stored is None:
            return None
        path, settings = stored
        return str(path), tuple(settings.get(key) for key in _IDENTITY_KEYS)


class FreshnessRegistry:
    """The `StoreFreshness` of every store a long-running process reads, created on first use, and the
    `Backlog` thread of every store, whichever its engine (a PostgreSQL store needs no freshness: its
    projection moves with every write)."""

    def __init__(self, *, recheck_s: float = RECHECK_S) -> None:
        self._recheck_s = recheck_s
        self._stores: dict[StorePaths, StoreFreshness] = {}
        self._backlogs: dict[StorePaths, Backlog] = {}
        self._lock = threading.Lock()

    def store(self, paths: StorePaths) -> StoreFreshness:
        with self._lock:
            found = self._stores.get(paths)
            if found is None:
                backlog = self._backlogs.setdefault(paths, Backlog(paths))
                found = self._stores[paths] = StoreFreshness(paths, recheck_s=self._recheck_s, backlog=backlog)
            return found

    def backlog(self, paths: StorePaths) -> Backlog:
        """The store's background embedding."""
        with self._lock:
            return self._backlogs.setdefault(paths, Backlog(paths))

    def sync(self, paths: StorePaths, embedder: Embedder | None) -> SyncReport | None:
        """`sync_store` unless the store is known to be current (None then)."""
        return self.store(paths).sync(embedder)

    def embedding(self) -> bool:
        """Whether a store's backlog is being embedded in the background now."""
        with self._lock:
            backlogs = list(self._backlogs.values())
        return any(backlog.running for backlog in backlogs)

    def changed(self, paths: StorePaths) -> None:
        """This process wrote records of `paths`."""
        with self._lock:
            found = self._stores.get(paths)
        if found is not None:
            found.changed()

    def close(self) -> None:
        """Stop every watcher."""
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
            backlogs, self._backlogs = list(self._backlogs.values()), {}
        for store in stores:
            store.close()
        for backlog in backlogs:
            backlog.close()


def shared_file_system(directory: Path, mounts: Path | None = None) -> bool:
    """Whether `directory` is on a file system that others can change without local events: network
    and shared-folder file systems and FUSE mounts (`fuse`, `fuse.sshfs`, …), by the mount table
    (`MOUNTS` unless given). False where there is no such table (not Linux)."""
    try:
        table = (mounts or MOUNTS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    target = os.path.realpath(directory)
    longest, kind = "", ""
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda code: chr(int(code.group(1), 8)), fields[1])  # "\040" is a space
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(longest):
            longest, kind = point, fields[2]
    return kind.split(".", 1)[0] in SHARED_FILE_SYSTEMS


def _wal(database: Path) -> Path:
    return database.with_name(database.name + "-wal")


def _stat(path: Path) -> FileSignature:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns

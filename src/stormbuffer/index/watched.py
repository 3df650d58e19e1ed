"""The record files of one store as a long-running process keeps them between its checks.

A one-shot process stats every record file to learn whether the projection is current
(`scan_files`). A long-running process lists them once and then re-stats only the paths its
watcher reported since (`RecordsWatcher.take_paths`), so that a check, a write's check included,
costs what changed rather than the size of the store. The list is compared with the projection by
its digest (`FileList.fingerprint`): equal means current. Any difference is settled on a fresh full
scan, never on the kept list, because a change made by another process can still be on its way
from the watcher (see `freshness`); so the kept list only ever confirms.

The list is scanned afresh when there is no trusted watcher, when the watcher's set of paths
overflowed or the watcher was replaced, when a directory below the records appeared, moved or was
removed, and when the last full scan is older than the recheck bound. A long-running process
confirms the kept list by a full scan in the background well within that bound (`verify`), so that
the bound is reached only when the two disagree or the background scan could not run.
"""

from __future__ import annotations

import math
import os
import sqlite3
import stat as stat_mode
import threading
import time
from collections.abc import Callable
from typing import Protocol

from ..core.stores import StorePaths
from . import projection as pj
from .sync import Embedder, FileList, SyncReport, current_report, projection_lock, scan_files, sync_scanned


class PathSource(Protocol):
    """What a watcher tells about the paths below the records directory."""

    def take_paths(self) -> set[str] | None:
        """The absolute paths reported since the last call (then forgotten); None when some were lost."""
        ...


class WatchedFiles:
    """One store's record files as its watcher keeps them (or, given no watcher, as scanned each time).

    Callers hold the store's projection lock, so a check and a write never use the list at once."""

    def __init__(
        self, paths: StorePaths, *, recheck_s: float = 0.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.paths = paths
        self._recheck_s = recheck_s
        self._clock = clock
        self._root = os.fspath(paths.records)
        self._list: FileList | None = None
        self._directories: set[str] = set()  # store-relative directories that hold record files
        self._source: PathSource | None = None
        self._scanned_at = 0.0
        self._lock = threading.Lock()

    def sync(
        self,
        source: PathSource | None,
        scope: str,
        embedder: Embedder | None,
        conn: sqlite3.Connection | None = None,
        *,
        embed_limit: int | None = None,
        defer: bool = False,
    ) -> tuple[SyncReport, FileList]:
        """`sync_scanned` on the kept list when its digest is the stored one, else on a fresh scan.
        `conn`: a writer connection to check with (left open); `embed_limit`, `defer`: as `sync_scanned`'s."""
        files, scanned = self.listed(source)
        report = current_report(self.paths, files.stats, embedder, files.fingerprint(), conn)
        if report is None:
            files = files if scanned else self.rescan(source)
            report = sync_scanned(
                self.paths, scope, files.stats, embedder, fingerprint=files.fingerprint(), embed_limit=embed_limit,
                defer=defer,
            )  # fmt: skip
        return report, files

    def listed(self, source: PathSource | None) -> tuple[FileList, bool]:
        """The files now, and whether they were scanned in full for it."""
        with self._lock:
            changed = source.take_paths() if source is not None else None
            kept = self._list
            if (kept is None or changed is None or source is not self._source
                    or self._clock() - self._scanned_at > self._recheck_s
                    or not all(self._restat(kept, path) for path in changed)):  # fmt: skip
                return self._scan(source), True
            return kept, False

    def rescan(self, source: PathSource | None) -> FileList:
        """The files by a full scan, kept from now on."""
        with self._lock:
            if source is not None:
                source.take_paths()  # what was reported up to now is in the scan
            return self._scan(source)

    def verify(self, source: PathSource) -> None:
        """Check the kept list against a full scan made off the check path (by a background thread, so
        that no check waits for a large store's scan): when they agree, the recheck bound starts again
        from the scan; otherwise the next check scans in full. Raises IndexBusy while the projection
        is busy (the kept list is then left as it is), StoreError without a records directory."""
        started = self._clock()
        scanned = FileList(scan_files(self.paths))
        with projection_lock(self.paths), self._lock:
            kept = self._list
            if kept is None or source is not self._source or self._scanned_at > started:
                return  # no list to confirm, or a check scanned in full meanwhile
            changed = source.take_paths()
            agree = changed is not None and all(self._restat(kept, path) for path in changed)
            self._scanned_at = started if agree and kept.fingerprint() == scanned.fingerprint() else -math.inf

    def _scan(self, source: PathSource | None) -> FileList:
        files = FileList(scan_files(self.paths))
        self._list = files if source is not None else None
        self._directories = {parent for name in files.stats for parent in _parents(name)} if source else set()
        self._source = source
        self._scanned_at = self._clock()
        return files

    def _restat(self, files: FileList, path: str) -> bool:
        """Note the current stat of one reported path; False when it takes a full scan (a directory)."""
        if not path.startswith(self._root + os.sep):
            return path != self._root  # the directory itself: the watcher retires when it is replaced
        name = "records/" + path[len(self._root) + 1 :].replace(os.sep, "/")
        try:
            info = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            info = None
        if info is not None and stat_mode.S_ISDIR(info.st_mode):
            return False
        if name.endswith(".md"):
            regular = info is not None and stat_mode.S_ISREG(info.st_mode)
            files.set(name, (info.st_size, info.st_mtime_ns, info.st_ino) if regular and info else None)
            return True
        # Anything else (a temp file, a symlink) is not a record, unless it was a directory of records.
        return info is not None or name not in self._directories


class ProjectionConnection:
    """A writer connection to a store's projection, opened when first needed and kept while the file
    stays the same one, so that a check or a write neither opens a connection nor, closing the last
    one, checkpoints the log. A file replaced (reindex) or removed (rebuild) is left to its new
    connections: SQLite neither checkpoints nor deletes the log of a moved database on close. Used
    by one thread at a time (the caller's lock says which)."""

    def __init__(self, paths: StorePaths) -> None:
        self.paths = paths
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None

    def get(self) -> sqlite3.Connection | None:
        """The connection; None when there is no projection file. Raises sqlite3.Error."""
        try:
            info = os.stat(self.paths.index_path)
        except FileNotFoundError:
            self.close()
            return None
        identity = (info.st_dev, info.st_ino)
        if self._conn is None or self._identity != identity:
            self.close()
            self._conn = pj.connect(self.paths.index_path, writer=True)
            self._identity = identity
        elif self._conn.in_transaction:  # left open by an interrupted caller
            self._conn.rollback()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _parents(name: str) -> list[str]:
    """The directories below the records directory that hold `name`, e.g. records/a and records/a/b."""
    parts = name.split("/")[1:-1]
    return ["/".join(["records", *parts[: depth + 1]]) for depth in range(len(parts))]

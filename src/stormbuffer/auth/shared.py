"""SQLite files the worker processes of one team server share (`sbuf serve --team --workers N`):
review-page sessions and rate-limit windows of a directory store, under `<store>/team/`.

They hold what one server run knows and nothing else: the server empties them when it starts, so
a session ends with the server, as with one process. WAL mode lets the workers read while one
writes; nothing there needs to survive a crash, so writes are not synced.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .tokens import TEAM_DIR

SESSIONS_FILE = "sessions.sqlite3"
WINDOWS_FILE = "ratelimit.sqlite3"
BUSY_MS = 5000


def shared_file(root: Path, name: str) -> Path:
    """`<store>/team/<name>`."""
    return root / TEAM_DIR / name


def reset(root: Path) -> None:
    """Forget every session and window of an earlier run of the store at `root`."""
    for name in (SESSIONS_FILE, WINDOWS_FILE):
        for suffix in ("", "-wal", "-shm"):
            shared_file(root, name + suffix).unlink(missing_ok=True)


class SharedDatabase:
    """One SQLite file opened on first use in this process (never across a fork), used by one thread
    at a time; `schema` is run when it is opened."""

    def __init__(self, path: Path, schema: str) -> None:
        self.path = path
        self.schema = schema
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The connection inside `BEGIN IMMEDIATE` … `COMMIT` (rolled back on an exception)."""
        with self._lock:
            connection = self._connect()
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            connection.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = OFF")
            connection.executescript(self.schema)
            self._connection = connection
        return self._connection

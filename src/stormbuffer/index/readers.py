"""Idle read connections to projection files, kept so that a long-running process reads warm.

Opening a connection costs about half a millisecond, and a new connection starts with an empty page
cache: every b-tree page a query touches is then read from the file again. A search at 10,000
records touches a few thousand pages. A long-running process that reads one projection many times
(the daemon, the MCP and HTTP servers) therefore calls `keep_warm` and gets back the connection it
used last. A one-shot process closes each connection after its read, as before: it reads once or
twice, and its projection's write-ahead log is then removed by the time it exits.

A connection is handed out again only for the same file it was opened on: the same device and inode
as the path has now, so a projection renamed over (reindex) or deleted (gc) is never read through an
old connection; that connection is closed instead. Each connection serves one reader at a time, and
a forked child starts with no idle connections (SQLite connections must not cross a fork).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path

IDLE_PER_FILE = 2  # readers at once per file in a warm process (the daemon serves a few sessions)
FILES = 8  # projection files with idle connections, the least recently read closed first

Identity = tuple[int, int]  # device and inode of a file


def identity(path: Path) -> Identity:
    """The device and inode `path` names now (OSError when it is gone)."""
    found = os.stat(path)
    return found.st_dev, found.st_ino


class ReaderPool:
    """Idle connections by file, each with the identity of the file it was opened on."""

    def __init__(self) -> None:
        self.enabled = False  # set by `keep_warm`
        self._lock = threading.Lock()
        self._idle: OrderedDict[str, list[tuple[Identity, sqlite3.Connection]]] = OrderedDict()

    def take(self, path: Path, now: Identity) -> sqlite3.Connection | None:
        """An idle connection to the file `path` names now, if there is one; idle ones to a file it no
        longer names are closed."""
        stale: list[sqlite3.Connection] = []
        found = None
        with self._lock:
            idle = self._idle.get(str(path), [])
            while idle and found is None:
                opened_on, conn = idle.pop()
                if opened_on == now:
                    found = conn
                else:
                    stale.append(conn)
        for conn in stale:
            conn.close()
        return found

    def give(self, path: Path, opened_on: Identity, conn: sqlite3.Connection) -> None:
        """Keep `conn` (out of any transaction) for the next reader of `path`, or close it when enough are kept."""
        closing: list[sqlite3.Connection] = []
        with self._lock:
            idle = self._idle.setdefault(str(path), [])
            self._idle.move_to_end(str(path))
            if self.enabled and len(idle) < IDLE_PER_FILE:
                idle.append((opened_on, conn))
            else:
                closing.append(conn)
            while len(self._idle) > FILES:
                closing.extend(conn for _identity, conn in self._idle.popitem(last=False)[1])
        for conn in closing:
            conn.close()

    def forget(self) -> None:
        """Drop every idle connection without closing it: in a forked child, closing one could release
        locks that the parent's connection to the same file holds."""
        _ABANDONED.append(self._idle)
        self._idle = OrderedDict()
        self._lock = threading.Lock()


def keep_warm() -> None:
    """This process is long-running: keep idle read connections from now on."""
    POOL.enabled = True


_ABANDONED: list[object] = []  # kept referenced, so that they are never closed in a forked child
POOL = ReaderPool()
os.register_at_fork(after_in_child=POOL.forget)

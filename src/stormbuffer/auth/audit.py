"""The team server's audit trail: who read or wrote which records, when, through which door.

An entry is one JSON object: the time, the principal's name (None when no valid token was sent),
the door, the operation, the answer's status, the record ids the request named, returned or wrote
(at most `MAX_IDS`, then how many more: `bounded`) and the receipt id of a context; never a token,
a secret or a record's text. A PostgreSQL store keeps its trail in its database
(`storage.audit_trail`); a directory store in a file, `AuditFile`:

One JSON object per line in `<store>/team/audit.jsonl` (0600, in the 0700 team directory), only ever
appended: each entry is one `write` to a file opened with `O_APPEND`, so concurrent servers of the
store never interleave entries.

`prune` drops the entries older than a time. It sorts the lines out without a lock, then holds the
file's exclusive lock while it adds what was appended meanwhile, writes the result to a new file
and renames it over the old one. Every append holds the shared lock and writes only to the file the
name holds once it has the lock, so an entry appended during a prune lands in the new file, never
in the replaced one.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stormbuffer.core.stores import StorePaths

from .tokens import TEAM_DIR

AUDIT_FILE = "audit.jsonl"
LEADING_TIME = re.compile(rb'\{"at":"([0-9T:.+Z-]{1,40})"[,}]')
MAX_IDS = 100


@dataclass(frozen=True)
class Filter:
    """Which entries `AuditTrail.entries` yields: by principal, by record id, from a time on."""

    who: str | None = None
    record: str | None = None
    since: datetime | None = None

    def matches(self, entry: dict[str, Any]) -> bool:
        if self.who is not None and entry.get("who") != self.who:
            return False
        if self.record is not None and self.record not in entry.get("records", ()):
            return False
        return self.since is None or entry_time(entry.get("at")) >= self.since


def bounded(entry: dict[str, Any]) -> dict[str, Any]:
    """`entry` with at most `MAX_IDS` record ids, and how many more it had."""
    records = list(entry.get("records", ()))
    if len(records) > MAX_IDS:
        return {**entry, "records": records[:MAX_IDS], "more_records": len(records) - MAX_IDS}
    return entry


class AuditFile:
    """The `AuditTrail` of a directory store: `<store>/team/audit.jsonl`."""

    waits = False

    def __init__(self, paths: StorePaths) -> None:
        self.folder = paths.root / TEAM_DIR
        self.file = self.folder / AUDIT_FILE

    def append(self, entry: dict[str, Any]) -> None:
        """Add `entry` (its `records` bounded to `MAX_IDS`) as one line."""
        line = json.dumps(bounded(entry), ensure_ascii=False, separators=(",", ":")) + "\n"
        self.folder.mkdir(mode=0o700, exist_ok=True)
        while True:
            fd = os.open(self.file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                if self._holds(fd):  # not replaced by a prune while this waited for the lock
                    os.write(fd, line.encode("utf-8"))
                    return
            finally:
                os.close(fd)

    def prune(self, before: datetime) -> int:
        """Drop the entries older than `before` (damaged lines are kept); how many were dropped.

        The lines are read and sorted out without the lock; the exclusive lock is held only to
        read what was appended meanwhile and to replace the file, so appends wait for a write, not
        for the whole sorting."""
        try:
            fd = os.open(self.file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return 0
        try:
            data = _read_from(fd, 0)
            end = data.rfind(b"\n") + 1  # whole lines only
            lines = data[:end].splitlines(keepends=True)
            kept = [line for line in lines if not _older(line, before)]
            if len(kept) == len(lines):
                return 0
            fcntl.flock(fd, fcntl.LOCK_EX)
            if not self._holds(fd):  # another prune replaced it meanwhile
                return 0
            self._replace(b"".join(kept) + _read_from(fd, end))
            return len(lines) - len(kept)
        finally:
            os.close(fd)

    def _holds(self, fd: int) -> bool:
        """Whether the open file `fd` is the one the trail's name holds now."""
        try:
            named = os.stat(self.file, follow_symlinks=False)
        except FileNotFoundError:
            return False
        opened = os.fstat(fd)
        return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)

    def _replace(self, data: bytes) -> None:
        """The trail's file replaced whole by `data`: written, synced, then renamed over it."""
        temporary = self.folder / f".{AUDIT_FILE}.{os.getpid()}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with open(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.file)
        folder = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)

    def entries(self, wanted: Filter) -> Iterator[dict[str, Any]]:
        """The entries `wanted` matches, oldest first; a damaged line is skipped."""
        try:
            handle = _open(self.file)
        except FileNotFoundError:
            return
        with handle:
            for line in handle:
                if wanted.record is not None and wanted.record not in line:
                    continue  # cheaper than parsing every entry to look for one record
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and wanted.matches(entry):
                    yield entry


def _read_from(fd: int, offset: int) -> bytes:
    """The bytes of the open file `fd` from `offset` to its end."""
    chunks = []
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _older(line: bytes, before: datetime) -> bool:
    """Whether `line` is an entry from before `before` (a damaged line is not)."""
    leading = LEADING_TIME.match(line)  # how `append` writes them: parsing the line whole is slower
    if leading is not None:
        return entry_time(leading.group(1).decode("ascii")) < before
    try:
        entry = json.loads(line)
    except ValueError:
        return False
    return isinstance(entry, dict) and "at" in entry and entry_time(entry["at"]) < before


def _open(path: Path) -> Any:
    return open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), encoding="utf-8", errors="replace")


def entry_time(value: object) -> datetime:
    """An entry's `at` as a time (the earliest time when it is not one)."""
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)

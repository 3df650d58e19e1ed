"""All-or-nothing writes of many record files, as an import needs them.

A change is staged, committed, then applied:

1. every new file content goes to a fsynced temp file beside its destination;
2. commit point: `locks/import.toml` lists each destination, its staged temp file and the sha256
   of the bytes the destination holds before (absent for a new file) and after the change;
3. each staged file is renamed over its destination, then the journal is deleted.

A crash before the commit point leaves every record untouched (orphaned temp files are disposable
and `sbuf gc` removes them). A crash after it is rolled forward by `recover`, which runs before
every locked operation and every read, so the store shows none or all of the change.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from .atomic import TEMP_SUFFIX, fsync_directory, remove_durably, write_atomic, write_temp
from .errors import Conflict, StoreIntegrityError
from .stores import StorePaths

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class FileWrite:
    """One file of the change: the destination must still hold `before` (None: must not exist)."""

    path: Path
    data: bytes
    before: bytes | None


@dataclass(frozen=True)
class _Entry:
    path: Path
    staged: Path
    before: str | None
    after: str


def commit(paths: StorePaths, writes: Sequence[FileWrite], progress: Callable[[int, int], None] | None = None) -> None:
    """Write every file or none. The caller holds the store's mutation lock.

    `progress(done, total)` is called after each file is staged.
    """
    for write in writes:
        _check_unchanged(write)
    entries: list[_Entry] = []
    try:
        for done, write in enumerate(writes, 1):
            staged = write_temp(write.path, write.data)
            entries.append(_Entry(write.path, staged, _digest_or_none(write.before), _digest(write.data)))
            if progress is not None:
                progress(done, len(writes))
        for directory in _directories(entries):
            fsync_directory(directory)
        write_atomic(paths.import_journal, _render(paths, entries))
    except BaseException:
        if not paths.import_journal.exists():
            for entry in entries:
                entry.staged.unlink(missing_ok=True)
        raise
    _apply(paths, entries)


def recover(paths: StorePaths) -> bool:
    """Finish an interrupted change; return True when a journal was found. The caller holds the lock.

    Every destination must still hold its before or after bytes, else nothing is touched.
    """
    if not paths.import_journal.exists():
        return False
    entries = _load(paths)
    for entry in entries:
        current = _digest_or_none(_read_or_none(entry.path))
        staged = _read_or_none(entry.staged)
        if staged is not None:
            ready = _digest(staged) == entry.after and current in (entry.before, entry.after)
        else:
            ready = current == entry.after
        if not ready:
            raise Conflict("import recovery conflicts with an authored change")
    _apply(paths, entries)
    return True


def _check_unchanged(write: FileWrite) -> None:
    if write.before is None:
        if write.path.exists() or write.path.is_symlink():
            raise StoreIntegrityError("record destination already exists")
    elif _read_or_none(write.path) != write.before:
        raise Conflict("record changed while it was being imported")


def _apply(paths: StorePaths, entries: Sequence[_Entry]) -> None:
    for entry in entries:
        if entry.staged.exists():
            os.replace(entry.staged, entry.path)
    for directory in _directories(entries):
        fsync_directory(directory)
    remove_durably(paths.import_journal)


def _directories(entries: Sequence[_Entry]) -> list[Path]:
    return sorted({entry.path.parent for entry in entries})


def _render(paths: StorePaths, entries: Sequence[_Entry]) -> bytes:
    files = []
    for entry in entries:
        item = {"path": _relative(paths, entry.path), "staged": _relative(paths, entry.staged)}
        if entry.before is not None:
            item["before"] = entry.before
        item["after"] = entry.after
        files.append(item)
    return tomli_w.dumps({"files": files}).encode()


def _load(paths: StorePaths) -> list[_Entry]:
    try:
        table = tomllib.loads(paths.import_journal.read_text(encoding="utf-8"))
        if set(table) != {"files"}:
            raise ValueError("unexpected keys")
        entries = []
        for item in table["files"]:
            if not set(item) <= {"path", "staged", "before", "after"}:
                raise ValueError("unexpected keys")
            path = _resolve(paths, item["path"], ".md")
            staged = _resolve(paths, item["staged"], TEMP_SUFFIX)
            before, after = item.get("before"), item["after"]
            if staged.parent != path.parent or not _DIGEST.fullmatch(after):
                raise ValueError("malformed entry")
            if before is not None and not _DIGEST.fullmatch(before):
                raise ValueError("malformed digest")
            entries.append(_Entry(path, staged, before, after))
        return entries
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError, AttributeError):
        raise StoreIntegrityError("import journal is invalid") from None


def _relative(paths: StorePaths, path: Path) -> str:
    return path.relative_to(paths.root).as_posix()


def _resolve(paths: StorePaths, text: str, suffix: str) -> Path:
    """A journal path: relative to the store root, inside the records directory, with `suffix`."""
    relative = Path(text)
    path = paths.root / relative
    inside = path.resolve().is_relative_to(paths.records.resolve())
    if relative.is_absolute() or ".." in relative.parts or not inside or not path.name.endswith(suffix):
        raise ValueError("journal path outside the records directory")
    return path


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _digest_or_none(data: bytes | None) -> str | None:
    return None if data is None else _digest(data)


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None

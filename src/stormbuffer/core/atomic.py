"""Crash-safe file writes: temp file in the same directory, fsync, rename, fsync the directory.

Every file written here is private (0600, whatever the umask), so it may hold a store's records.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .dirs import PRIVATE_FILE_MODE

TEMP_SUFFIX = ".tmp"


def temp_path_for(path: Path, attempt: int = 0) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{time.time_ns() + attempt}{TEMP_SUFFIX}")


def write_temp(path: Path, data: bytes) -> Path:
    """Write `data` to a new, fsynced temp file beside `path` and return the temp file's path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1000):
        temp = temp_path_for(path, attempt)
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
        except FileExistsError:
            continue
        break
    else:  # pragma: no cover - a thousand collisions means something else is wrong
        raise OSError("could not create a temporary file")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that readers see the old or the new bytes, never a mix."""
    temp = write_temp(path, data)
    try:
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def create_atomic(path: Path, data: bytes) -> bool:
    """Create `path` with `data` unless it exists (then False, nothing written): the temp file is linked
    to its name, which fails when the name is taken, so a file made meanwhile by anyone is never replaced."""
    temp = write_temp(path, data)
    try:
        os.link(temp, path)
    except FileExistsError:
        return False
    finally:
        temp.unlink(missing_ok=True)
    fsync_directory(path.parent)
    return True


def replace_atomic_if(path: Path, expected: bytes | None, data: bytes) -> bool:
    """`write_atomic`, but only while `path` still holds `expected` (None: the file must not exist);
    False (nothing written) otherwise. The check runs after the new bytes are on disk, just before the
    rename, so an edit made meanwhile by a process that takes no lock is seen, except in the instant
    between the check and the rename."""
    if expected is None:
        return create_atomic(path, data)
    temp = write_temp(path, data)
    try:
        if read_or_none(path) != expected:
            temp.unlink(missing_ok=True)
            return False
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)
    return True


def read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def remove_durably(path: Path) -> None:
    path.unlink()
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    fsync_path(directory)


def fsync_path(path: Path) -> None:
    """Flush a file or directory, named by its path, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

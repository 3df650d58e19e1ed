"""Disk usage of a store, measured without creating anything: canonical and disposable files.

Canonical: `store.toml` and every file under `records/`. Disposable: the SQLite projection (the
database and every companion file named after it, plus `projection.lock`) and everything under
`tmp/`, `logs/` and `locks/`. The shared model cache is never counted. Symlinks count as nothing.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .stores import StorePaths, trusted_fallback_index_dir

PROJECTION_LOCK = "projection.lock"


def file_bytes(path: Path) -> int:
    """The size of a regular file (symlinks, directories and missing files count as nothing)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


def tree_bytes(directory: Path) -> int:
    """The size of every regular file below `directory` (symlinks are not followed)."""
    total = 0
    for parent, _dirs, files in os.walk(directory):
        total += sum(file_bytes(Path(parent, name)) for name in files)
    return total


def canonical_bytes(paths: StorePaths) -> int:
    return file_bytes(paths.config_file) + tree_bytes(paths.records)


def projection_files(paths: StorePaths) -> list[Path]:
    """The existing regular files of the store's projection: in the root for a project store, in the
    shared cache (or its temp-directory fallback, when it is this user's private directory) for the
    global store."""
    fallback = trusted_fallback_index_dir(paths.root)
    directories = [paths.root] if paths.kind == "project" else [paths.cache_dir, *([fallback] if fallback else [])]
    found = []
    for directory in directories:
        if not directory.is_dir():
            continue
        for entry in sorted(directory.iterdir()):
            named = entry.name.startswith(paths.index_name) or entry.name == PROJECTION_LOCK
            if named and entry.is_file() and not entry.is_symlink():
                found.append(entry)
    return found


def disposable_bytes(paths: StorePaths) -> int:
    scratch = sum(tree_bytes(paths.root / name) for name in ("tmp", "logs", "locks"))
    return scratch + sum(file_bytes(path) for path in projection_files(paths))

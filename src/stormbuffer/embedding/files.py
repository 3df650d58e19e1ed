"""File helpers for the model cache: streaming hashes and a crash-safe streaming copy."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from stormbuffer.core.atomic import fsync_directory, temp_path_for

CHUNK_BYTES = 1 << 20


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def blake3_file(path: Path) -> str:
    """Hex blake3 of a file, read in chunks."""
    from blake3 import blake3

    digest = blake3()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def copy_atomic(source: Path, dest: Path) -> str:
    """Copy `source` over `dest` (temp file, fsync, rename); returns the sha256 of the bytes written.

    On any error the temp file is removed and `dest` is left as it was.
    """
    digest = hashlib.sha256()
    temp = temp_path_for(dest)
    try:
        with source.open("rb") as src, temp.open("xb") as out:
            while chunk := src.read(CHUNK_BYTES):
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, dest)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_directory(dest.parent)
    return digest.hexdigest()

"""Helpers for tests that inspect or damage a model cache."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from stormbuffer.embedding import DEFAULT_VARIANT
from stormbuffer.embedding.cache import MODELS_DIR, built_dir_name


def model_dir(cache_dir: Path, variant: str = DEFAULT_VARIANT) -> Path:
    return cache_dir / MODELS_DIR / built_dir_name(variant)


def rewrite_keeping_stat(path: Path, edit: Callable[[bytearray], None]) -> None:
    """Change bytes in place while keeping the file's size and mtime, as silent corruption would."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    edit(data)
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size

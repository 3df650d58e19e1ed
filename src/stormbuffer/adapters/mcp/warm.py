"""The embedder slot of a long-running adapter: load the model on first use and keep it warm.

The first `memory_recall` opens the model from the cache (a cheap manifest check); when it was
never acquired or its cache is damaged, it is acquired (built from the installed model package
or downloaded, and verified) and opened again. A success is kept for the life of the process; a
failure is reported as a fallback reason and retried by the next recall. Concurrent first calls
initialize the model once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stormbuffer.embedding import Embedder

MODEL_UNAVAILABLE = "model_unavailable"
EMBEDDER_INIT_FAILED = "embedder_initialization_failed"


def open_model(cache_dir: Path) -> Embedder:
    """Open the model in `cache_dir`, acquiring (or repairing) it first when it cannot be opened."""
    from stormbuffer.embedding import EmbedderInitError, ModelUnavailable, acquire_model, load_embedder

    try:
        return load_embedder(cache_dir)
    except (ModelUnavailable, EmbedderInitError):
        acquire_model(cache_dir)
    return load_embedder(cache_dir)


class WarmEmbedder:
    """An `EmbedderSlot` that opens the model lazily and keeps it between calls."""

    def __init__(self, cache_dir: Path, opener: Callable[[Path], Embedder] = open_model) -> None:
        self._cache_dir = cache_dir
        self._opener = opener
        self._lock = threading.Lock()
        self._embedder: Embedder | None = None

    def get(self, *, acquire: bool = True) -> tuple[Embedder | None, str | None]:
        """The embedder, or `None` with the fallback reason of this attempt. Without `acquire`, only
        a model that is already prepared is opened, as `sbuf invoke` does."""
        from stormbuffer.embedding import ModelUnavailable, load_embedder

        with self._lock:
            if self._embedder is None:
                try:
                    self._embedder = (self._opener if acquire else load_embedder)(self._cache_dir)
                except ModelUnavailable:
                    return None, MODEL_UNAVAILABLE
                except Exception:  # EmbedderInitError, or the runtime refusing the model: recall goes lexical
                    return None, EMBEDDER_INIT_FAILED
            return self._embedder, None

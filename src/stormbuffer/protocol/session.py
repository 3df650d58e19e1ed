"""What one caller of the protocol works with: a view, its selected store, an embedder slot and,
in a long-running process, the freshness registry that lets reads skip the full sync check."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from stormbuffer.core.stores import PlatformDirs, StorePaths, View

if TYPE_CHECKING:
    from stormbuffer.embedding import Embedder
    from stormbuffer.index.freshness import FreshnessRegistry


class EmbedderSlot(Protocol):
    def get(self) -> tuple[Embedder | None, str | None]:
        """The embedder, or None and the semantic fallback reason."""
        ...


@dataclass
class Session:
    view: View
    selected: StorePaths
    dirs: PlatformDirs
    embedder: EmbedderSlot
    freshness: FreshnessRegistry | None = None  # None: every read checks every record file


class OneShotEmbedder:
    """The embedder of a one-shot process: the already acquired model, loaded on first use.

    It never acquires or builds a model (that is `sbuf init`'s job), so a process without a model
    answers lexically with the reason (`model_unavailable`, or `embedder_initialization_failed` for
    a damaged cache) instead of spending seconds on a build.
    """

    def __init__(self, cache_dir: Path) -> None:
        self._cache_dir = cache_dir
        self._loaded: tuple[Embedder | None, str | None] | None = None
        self._loading: threading.Thread | None = None

    def prefetch(self) -> None:
        """Start opening the model on a background thread (`get` waits for it)."""
        if self._loading is None and self._loaded is None:
            self._loading = threading.Thread(target=self._load, name="stormbuffer-model-open", daemon=True)
            self._loading.start()

    def settle(self) -> None:
        """Wait for a prefetch that is still opening the model: a process must not exit while that
        thread is inside onnxruntime's native code (its runtime aborts the process)."""
        if self._loading is not None:
            self._loading.join()
            self._loading = None

    def get(self) -> tuple[Embedder | None, str | None]:
        self.settle()
        if self._loaded is None:  # not prefetched, or the prefetch failed unexpectedly: fail here, visibly
            self._load()
        assert self._loaded is not None
        return self._loaded

    def _load(self) -> None:
        from stormbuffer.retrieval import open_embedder

        self._loaded = open_embedder(self._cache_dir)


class NoEmbedder:
    """A slot without a model: retrieval stays lexical and says why."""

    def __init__(self, reason: str = "intentionally_unavailable") -> None:
        self.reason = reason

    def get(self) -> tuple[Embedder | None, str | None]:
        return None, self.reason

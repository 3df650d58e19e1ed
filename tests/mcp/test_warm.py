"""The adapter's embedder slot: lazy, kept once loaded, failures reported and retried."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from stormbuffer.adapters.mcp.warm import WarmEmbedder
from stormbuffer.embedding import EmbedderInitError, ModelUnavailable

from .conftest import ACTIVE_ID, Store, call, connect


class Opener:
    """Stands in for opening the model: fails with the queued errors first, then returns a marker."""

    def __init__(self, *failures: Exception, pause: float = 0.0) -> None:
        self.failures = list(failures)
        self.pause = pause
        self.calls = 0
        self.embedder = object()

    def __call__(self, cache_dir: Path) -> Any:
        self.calls += 1
        time.sleep(self.pause)
        if self.failures:
            raise self.failures.pop(0)
        return self.embedder


def test_nothing_is_opened_before_the_first_use(tmp_path: Path) -> None:
    opener = Opener()
    WarmEmbedder(tmp_path, opener)
    assert opener.calls == 0


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (ModelUnavailable("not acquired"), "model_unavailable"),
        (EmbedderInitError("damaged"), "embedder_initialization_failed"),
        (RuntimeError("the runtime refused the graph"), "embedder_initialization_failed"),
    ],
)
def test_a_failure_is_reported_then_retried(tmp_path: Path, failure: Exception, reason: str) -> None:
    opener = Opener(failure)
    slot = WarmEmbedder(tmp_path, opener)
    assert slot.get() == (None, reason)
    assert slot.get() == (opener.embedder, None)
    assert slot.get() == (opener.embedder, None)
    assert opener.calls == 2


def test_concurrent_first_calls_open_the_model_once(tmp_path: Path) -> None:
    opener = Opener(pause=0.2)
    slot = WarmEmbedder(tmp_path, opener)
    results: list[tuple[Any, str | None]] = []
    threads = [threading.Thread(target=lambda: results.append(slot.get())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [(opener.embedder, None)] * 4
    assert opener.calls == 1


@pytest.mark.anyio
async def test_recall_falls_back_while_the_model_is_unavailable_and_recovers(store: Store) -> None:
    """A recall without a usable model cache is lexical with the reason; the next one acquires the model."""
    store.seed()
    models = store.box.base / "cache" / "stormbuffer" / "models"
    shutil.rmtree(models)
    models.write_text("not a directory", encoding="utf-8")
    async with connect(store.box, "--project") as client:
        first = await call(client, "memory_recall", {"query": "release constraint"})
        models.unlink()
        second = await call(client, "memory_recall", {"query": "release constraint"})
    receipt = first["result"]["receipt"]
    assert (receipt["retrieval_mode"], receipt["semantic_fallback"]) == ("lexical", "model_unavailable")
    assert (receipt["embedding_model"], receipt["embedding_version"]) == (None, None)
    assert first["result"]["blocks"][0]["record_id"] == ACTIVE_ID
    receipt = second["result"]["receipt"]
    assert (receipt["retrieval_mode"], receipt["semantic_fallback"]) == ("hybrid", None)
    assert second["result"]["blocks"][0]["record_id"] == ACTIVE_ID

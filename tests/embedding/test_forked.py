"""The model opened and run in a forked child process, as a one-shot `sbuf invoke` search does."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from stormbuffer.embedding import DEFAULT_VARIANT, Embedder, EmbeddingFailed, open_embedder
from stormbuffer.embedding.forked import ForkedEmbedder

TEXTS = ["Deploys need two approvals.", "The cache lives in ~/.cache/stormbuffer", "数据库迁移需要回滚计划"]


@pytest.fixture
def child(model_cache: Callable[[str], Path]) -> Iterator[ForkedEmbedder]:
    cache = model_cache(DEFAULT_VARIANT)
    forked = ForkedEmbedder.start(lambda: open_embedder(cache))
    yield forked
    forked.close()


def gone(pid: int) -> bool:
    """True when `pid` is no longer a child of this process (it was reaped)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_the_child_embeds_and_counts_exactly_as_the_model_does_here(child: ForkedEmbedder, embedder: Embedder) -> None:
    opened, reason = child.opened() or (None, "ended")
    assert opened is child and reason is None
    assert (child.model_id, child.model_version, child.dimension, child.max_tokens) == (
        embedder.model_id, embedder.model_version, embedder.dimension, embedder.max_tokens,
    )  # fmt: skip
    vectors = child.embed(TEXTS)
    assert vectors.dtype == np.float32 and vectors.shape == (3, embedder.dimension)
    np.testing.assert_allclose(vectors, embedder.embed(TEXTS), atol=1e-6)
    assert [child.token_count(text) for text in TEXTS] == [embedder.token_count(text) for text in TEXTS]


def test_the_models_own_errors_cross_the_process_boundary(child: ForkedEmbedder) -> None:
    assert child.opened() is not None
    with pytest.raises(ValueError, match="model tokens"):
        child.embed(["word " * 400])
    with pytest.raises(ValueError, match="list of strings"):
        child.embed("not a list")  # type: ignore[arg-type]
    assert child.embed(["still serving"]).shape[0] == 1


def test_a_child_that_is_killed_makes_calls_fail_as_the_model_failing(child: ForkedEmbedder) -> None:
    assert child.opened() is not None
    pid = child.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(EmbeddingFailed):
        child.embed(["anyone there?"])
    child.close()
    assert gone(pid)


def test_a_missing_model_is_reported_with_its_reason_and_the_child_is_reaped(tmp_path: Path) -> None:
    forked = ForkedEmbedder.start(lambda: open_embedder(tmp_path / "no-models"))
    pid = forked.pid
    assert forked.opened() == (None, "model_unavailable")
    assert pid is not None and gone(pid)


def test_a_child_that_fails_unexpectedly_says_nothing_and_is_reaped() -> None:
    def broken() -> tuple[Embedder | None, str | None]:
        raise RuntimeError("unexpected")

    forked = ForkedEmbedder.start(broken)
    pid = forked.pid
    assert forked.opened() is None
    assert pid is not None and gone(pid)


def test_closing_while_the_model_still_opens_ends_the_child_at_once(model_cache: Callable[[str], Path]) -> None:
    cache = model_cache(DEFAULT_VARIANT)
    forked = ForkedEmbedder.start(lambda: open_embedder(cache))
    pid = forked.pid
    forked.close()
    assert pid is not None and gone(pid)
    with pytest.raises(EmbeddingFailed):
        forked.embed(["closed"])

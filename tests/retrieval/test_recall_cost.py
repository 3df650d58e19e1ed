"""What a warm recall saves (a recent query's vector, the vector side's rows copied from the lexical
side's) leaves every answer as it was computed in full."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from stormbuffer.core.stores import StorePaths
from stormbuffer.embedding import Embedder
from stormbuffer.engines import projection as engine
from stormbuffer.index.sync import sync_store
from stormbuffer.retrieval import ContextOptions, SearchOptions, context, ready_for_retrieval, search
from stormbuffer.retrieval.lexical import lexical_hits
from stormbuffer.retrieval.query_vectors import QueryVectors
from stormbuffer.retrieval.search import effective_options, embed_ahead
from stormbuffer.retrieval.semantic import vector_hits
from tests.retrieval.test_hybrid import FailingEmbedder
from tests.stores import make_store, write_record

CORPUS = {
    "Database backups": "Nightly snapshots of the Postgres cluster are copied to cold storage and kept for 30 days.",
    "Release checklist": "Before tagging a release, run the full test suite and update the changelog.",
    "Backup restore drill": "Every quarter we restore a nightly snapshot into staging and time the restore.",
    "Incident paging": "When production alerts fire at night, the on-call engineer is woken by a phone call.",
    "Storage costs": "Cold storage of snapshots costs little; restoring from it takes hours.",
}


class CountingEmbedder(FailingEmbedder):
    """The real model, counting the texts it embeds (the identity and tokenizer as `FailingEmbedder`'s)."""

    def __init__(self, real: Embedder) -> None:
        super().__init__(real)
        self.embedded: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.embedded += texts
        return self._real.embed(texts)


@pytest.fixture
def store(tmp_path: Path, embedder: Embedder) -> StorePaths:
    paths = make_store(tmp_path)
    for title, body in CORPUS.items():
        write_record(paths, title, body)
    sync_store(paths, embedder)
    return paths


def test_a_query_asked_again_is_not_embedded_again_and_answers_the_same(store: StorePaths, embedder: Embedder) -> None:
    counting = CountingEmbedder(embedder)
    first = context([store], "restore nightly snapshots", embedder=counting).to_json()  # type: ignore[arg-type]
    again = context([store], "restore nightly snapshots", embedder=counting).to_json()  # type: ignore[arg-type]
    assert counting.embedded == ["restore nightly snapshots"]
    assert first["blocks"] == again["blocks"] and first["blocks"]
    assert context([store], "restore nightly snapshots ", embedder=counting).to_json()["blocks"]  # type: ignore[arg-type]
    assert counting.embedded == ["restore nightly snapshots", "restore nightly snapshots"]  # other text: embedded


def test_another_embedder_never_gets_a_vector_it_did_not_make(store: StorePaths, embedder: Embedder) -> None:
    one, other = CountingEmbedder(embedder), CountingEmbedder(embedder)
    search([store], "cold storage costs", embedder=one)  # type: ignore[arg-type]
    search([store], "cold storage costs", embedder=other)  # type: ignore[arg-type]
    assert one.embedded == other.embedded == ["cold storage costs"]


def test_kept_vectors_are_read_only_and_bounded() -> None:
    kept, owner, made = QueryVectors(size=2), object(), []

    def embed(text: str) -> np.ndarray:
        made.append(text)
        return np.full(4, float(len(made)), dtype=np.float32)

    vector = kept.get(owner, "a", lambda: embed("a"))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        vector[0] = 9.0
    for text in ("b", "a", "c", "a", "b"):  # "b" is the least recently used when "c" comes
        kept.get(owner, text, lambda text=text: embed(text))  # type: ignore[arg-type, misc]
    assert made == ["a", "b", "c", "b"]


def test_vector_hits_copied_from_lexical_hits_equal_those_read(store: StorePaths, embedder: Embedder) -> None:
    query = "nightly snapshots restore"
    options = effective_options([store], SearchOptions(limit=len(CORPUS)))
    vector = embedder.embed([query])[0]
    with engine.reading(store) as projection:
        matrix = projection.vector_search(embedder)
        assert matrix is not None
        nearest = matrix.nearest(vector, options, len(CORPUS))
        lexical = lexical_hits(projection, query, options, 20)
        read = vector_hits(projection, nearest, options)
        copied = vector_hits(projection, nearest, options, {hit.chunk: hit for hit in lexical})
    assert {hit.chunk for hit in lexical} & set(nearest.chunks)  # some are copied
    assert copied == read and len(read) == len(nearest.chunks)
    assert all(hit.lexical_match_reason != "vector" for hit in lexical)  # the lexical hits are left as they were


def test_copied_is_dataclasses_replace(store: StorePaths) -> None:
    hit = search([store], "release checklist")[0]
    assert hit.copied(score=2.5, bm25=0.0) == replace(hit, score=2.5, bm25=0.0)
    assert hit.copied().match_reasons is hit.match_reasons  # shallow, as `replace` is


def test_budgets_and_limits_give_the_same_blocks_warm_as_cold(store: StorePaths, embedder: Embedder) -> None:
    """Each query asked three times: embedded by a new embedder, then by another, then its vector kept."""
    for query in ("snapshots", "who is woken at night", "release changelog suite", "restore hours"):
        for budget, limit in ((512, 20), (8, 2), (4000, 50)):
            options = ContextOptions(budget, SearchOptions(limit=limit))
            answers = [context([store], query, options, embedder=CountingEmbedder(embedder) if n == 0 else embedder)
                       for n in range(3)]  # fmt: skip
            blocks = [[block.to_json() for block in answer.blocks] for answer in answers]
            assert blocks[0] == blocks[1] == blocks[2]


def test_a_query_being_embedded_is_embedded_once_for_every_caller() -> None:
    kept, owner, made = QueryVectors(size=2), object(), []
    started, release = threading.Event(), threading.Event()

    def slow(text: str) -> np.ndarray:
        made.append(text)
        started.set()
        release.wait(10)
        return np.ones(4, dtype=np.float32)

    got: list[np.ndarray] = []
    first = threading.Thread(target=lambda: got.append(kept.get(owner, "q", lambda: slow("q"))))  # type: ignore[arg-type]
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: got.append(kept.get(owner, "q", lambda: slow("again"))))  # type: ignore[arg-type]
    second.start()
    second.join(0.2)
    assert second.is_alive()  # waiting for the first caller's vector, not embedding it again
    release.set()
    first.join(10)
    second.join(10)
    assert made == ["q"] and len(got) == 2 and got[0] is got[1]

    def failing() -> np.ndarray:
        raise RuntimeError("model failed")

    with pytest.raises(RuntimeError):
        kept.get(owner, "bad", failing)  # type: ignore[arg-type]
    assert kept.get(owner, "bad", lambda: np.zeros(4, dtype=np.float32)).tolist() == [0.0] * 4  # type: ignore[arg-type]


def test_a_query_embedded_while_the_store_is_readied_is_the_one_the_search_uses(
    store: StorePaths, embedder: Embedder
) -> None:
    query = "who restores the snapshots each quarter"
    options = ContextOptions(512, SearchOptions(limit=5))
    cold = context([store], query, options, embedder=CountingEmbedder(embedder)).to_json()  # type: ignore[arg-type]
    counting = CountingEmbedder(embedder)
    ready = ready_for_retrieval([store], lambda: (counting, None),  # type: ignore[arg-type, return-value]
                                opened=lambda opened: embed_ahead(opened, query, options.search))  # fmt: skip
    assert ready.embedder is counting
    deadline = time.monotonic() + 30
    while not counting.embedded and time.monotonic() < deadline:
        time.sleep(0.01)
    assert counting.embedded == [query]  # embedded before any search asked for it
    warm = context([store], query, options, embedder=counting).to_json()  # type: ignore[arg-type]
    assert counting.embedded == [query]  # the search took that vector
    assert warm["blocks"] == cold["blocks"] and warm["blocks"]

    lexical = CountingEmbedder(embedder)
    ready_for_retrieval([store], lambda: (lexical, None),  # type: ignore[arg-type, return-value]
                        opened=lambda opened: embed_ahead(opened, query, SearchOptions(mode="lexical")))  # fmt: skip
    search([store], query, SearchOptions(mode="lexical"), embedder=lexical)  # type: ignore[arg-type]
    assert lexical.embedded == []  # a lexical search embeds nothing, ahead or not

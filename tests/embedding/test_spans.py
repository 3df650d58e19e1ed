"""Vectors of the parts of a text from the text's own pass (`Embedder.embed_spans`), what sync stores
from them, and bulk embedding on several workers."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime

from stormbuffer.embedding import DEFAULT_VARIANT, Embedder, load_tokenizer, open_embedder
from stormbuffer.embedding.cache import MODELS_DIR, built_dir_name
from stormbuffer.embedding.embedder import Embedder as OnnxEmbedder
from stormbuffer.embedding.forked import ForkedEmbedder
from stormbuffer.embedding.manifest import read_manifest
from stormbuffer.embedding.onnx_graph import TOKEN_STATES
from stormbuffer.index.chunking import own_sentences, sentence_spans
from stormbuffer.index.sync import sync_store
from tests.stores import make_store, write_record

PASTA = "Boil the pasta in salted water for nine minutes and keep a cup of the cooking water for the sauce."
PODS = "A Kubernetes pod that fails its readiness probe is taken out of the service's endpoints until it recovers."
TEXT = f"Notes\n{PASTA} {PODS}"


def spans_of(text: str, *parts: str) -> list[tuple[int, int]]:
    return [(text.index(part), text.index(part) + len(part)) for part in parts]


def test_one_pass_gives_the_text_its_usual_vector_and_each_span_its_own(embedder: Embedder) -> None:
    texts = [TEXT, "A short note."]
    vectors, spans = embedder.embed_spans(texts, [spans_of(TEXT, PASTA, PODS), []])
    assert np.abs(vectors - embedder.embed(texts)).max() < 1e-5
    assert [own.shape for own in spans] == [(2, embedder.dimension), (0, embedder.dimension)]
    assert np.allclose(np.linalg.norm(spans[0], axis=1), 1.0, atol=1e-5)
    alone = embedder.embed([PASTA, PODS])
    similarity = spans[0] @ alone.T  # each span is nearest the same words embedded alone
    assert similarity[0, 0] > similarity[0, 1] + 0.2 and similarity[1, 1] > similarity[1, 0] + 0.2


def test_a_span_is_pooled_as_the_model_pools_a_text_so_the_whole_text_gets_its_own_vector(
    embedder: Embedder,
) -> None:
    texts = [TEXT, PASTA, "A short note."]
    vectors, spans = embedder.embed_spans(texts, [[(0, len(text))] for text in texts])
    for vector, own in zip(vectors, spans, strict=True):
        assert np.abs(own[0] - vector).max() < 1e-5  # [CLS] and [SEP] counted, as the model's mean pooling does


def test_the_graph_gives_token_states_and_a_graph_with_only_them_pools_spans_too(
    embedder: Embedder, token_state_model: bytes, model_cache: Callable[[str], Path]
) -> None:
    assert embedder.pools_spans
    assert TOKEN_STATES in {output.name for output in embedder._session.get_outputs()}
    manifest = read_manifest(model_cache(DEFAULT_VARIANT) / MODELS_DIR / built_dir_name(DEFAULT_VARIANT))
    assert manifest is not None
    session = onnxruntime.InferenceSession(token_state_model, providers=["CPUExecutionProvider"])
    states_only = OnnxEmbedder(session, load_tokenizer(), manifest, "model.onnx")
    wanted = [spans_of(TEXT, PASTA, PODS)]
    vectors, spans = states_only.embed_spans([TEXT], wanted)
    expected_vectors, expected_spans = embedder.embed_spans([TEXT], wanted)
    assert np.abs(vectors - expected_vectors).max() < 1e-5 and np.abs(spans[0] - expected_spans[0]).max() < 1e-5


def test_a_span_without_tokens_gets_its_text_embedded(embedder: Embedder) -> None:
    text = "Tabs\t\tand words"
    _vectors, spans = embedder.embed_spans([text], [[(4, 6)]])
    assert np.abs(spans[0][0] - embedder.embed([text[4:6]])[0]).max() < 1e-5


def test_bulk_embedding_on_several_workers_gives_the_same_vectors(embedder: Embedder) -> None:
    texts = [f"Record {number}: " + "the ferry leaves the harbour at dawn " * (number % 7 + 1) for number in range(80)]
    workers = embedder.workers
    try:
        embedder.workers = 1
        one = embedder.embed_spans(texts, [[(0, 6)]] * len(texts))
        embedder.workers = 2
        two = embedder.embed_spans(texts, [[(0, 6)]] * len(texts))
    finally:
        embedder.workers = workers
    assert np.array_equal(one[0], two[0]) and all(np.array_equal(a, b) for a, b in zip(one[1], two[1], strict=True))


def test_the_forked_child_answers_span_calls(model_cache: Callable[[str], Path], embedder: Embedder) -> None:
    cache = model_cache(DEFAULT_VARIANT)
    forked = ForkedEmbedder.start(lambda: open_embedder(cache))
    try:
        assert forked.opened() == (forked, None)
        vectors, spans = forked.embed_spans([TEXT], [spans_of(TEXT, PODS)])
    finally:
        forked.close()
    expected_vectors, expected_spans = embedder.embed_spans([TEXT], [spans_of(TEXT, PODS)])
    assert np.array_equal(vectors, expected_vectors) and np.array_equal(spans[0], expected_spans[0])


def test_sync_stores_each_sentence_pooled_from_its_chunk(tmp_path: Path, embedder: Embedder) -> None:
    body = f"{PASTA}\n{PODS}\nRotate the on-call pager every Monday morning and hand over open incidents in writing."
    paths = make_store(tmp_path)
    write_record(paths, "Mixed notes", body)
    sync_store(paths, embedder)
    with sqlite3.connect(paths.index_path) as conn:
        embed_text, text, blob = conn.execute(
            "SELECT c.embed_text, c.text, v.sentence_vectors FROM chunks AS c JOIN vectors AS v USING (embed_hash)"
        ).fetchone()
    stored = np.frombuffer(blob, dtype="<f4").reshape(-1, embedder.dimension)
    assert len(stored) == len(own_sentences(text)) == 2  # the last, short sentence joins the one before
    offset = len(embed_text) - len(text)
    _vectors, expected = embedder.embed_spans(
        [embed_text], [[(offset + start, offset + end) for start, end in sentence_spans(text)]]
    )
    assert np.abs(stored - expected[0]).max() < 1e-6

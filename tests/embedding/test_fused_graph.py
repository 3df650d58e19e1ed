"""The default graph, attention fused into onnxruntime's `Attention` operator, computes what plain BERT
arithmetic computes on the same int8-stored weights; a store embedded by the previous graph re-embeds."""

from __future__ import annotations

import json
import sqlite3
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stormbuffer.core.stores import StorePaths
from stormbuffer.embedding import Embedder, load_tokenizer
from stormbuffer.embedding.cache import _built_recipe
from stormbuffer.embedding.manifest import recipe_checksum
from stormbuffer.embedding.onnx_graph import GRAPH_VERSION
from stormbuffer.index import projection as pj
from stormbuffer.index.sync import sync_store
from tests.stores import make_store, write_record

from .reference import sentence_embeddings

TEXTS = [
    "deploy",
    "Redis",
    "a",
    "?",
    "naïve café résumé",
    "how do we deploy",
    "Use `git rebase -i HEAD~3` to squash the last three commits.",
    "SQLite WAL mode allows readers to proceed while a writer commits, and a checkpoint folds the log back.",
    "2023/11/04 (Sat) 02:00 user\nI'm planning a movie night with friends and want a theme; I just watched "
    "Parasite and it got me thinking about other films on social class. Can you recommend a few?",
    " ".join(["The harbour pilots board every tanker at the outer buoy before dawn."] * 12),
]


def wq8_weights(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The float64 weights as the wq8 variant stores them: each encoder matrix int8 with one scale
    per 32 input rows and output column, the word table int8 with one scale per row."""

    def round_trip(value: np.ndarray, axis: int) -> np.ndarray:
        amax = np.abs(value).max(axis=axis, keepdims=True)
        scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
        return np.clip(np.rint(value / scale), -127, 127) * scale.astype(np.float64)

    out = dict(weights)
    for name, value in weights.items():
        if name.startswith("encoder.") and name.endswith(".weight") and value.ndim == 2:
            rows, cols = value.T.shape
            blocks = value.T.astype(np.float32).reshape(rows // 32, 32, cols)
            out[name] = round_trip(blocks, axis=1).reshape(rows, cols).T
    table = weights["embeddings.word_embeddings.weight"].astype(np.float32)
    out["embeddings.word_embeddings.weight"] = round_trip(table, axis=1)
    return out


@pytest.fixture(scope="module")
def stored(reference_weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return wq8_weights(reference_weights)


def plain(weights: dict[str, np.ndarray], config: dict[str, Any], texts: list[str]) -> np.ndarray:
    """The NumPy float64 pass, one text at a time (no padding)."""
    ids = load_tokenizer().token_ids(texts)
    return np.concatenate([sentence_embeddings(weights, config, [one]) for one in ids])


def test_default_vectors_equal_the_plain_arithmetic_on_its_weights(
    wq8: Embedder, stored: dict[str, np.ndarray], model_config: dict[str, Any]
) -> None:
    expected = plain(stored, model_config, TEXTS)
    batched = wq8.embed(TEXTS)  # padded batches of mixed lengths
    alone = np.concatenate([wq8.embed([text]) for text in TEXTS])
    for actual in (batched, alone):
        assert np.sum(actual * expected, axis=1).min() >= 0.99999


def test_the_checked_in_corpus_ranks_as_with_the_plain_arithmetic(
    wq8: Embedder, stored: dict[str, np.ndarray], model_config: dict[str, Any]
) -> None:
    corpus = json.loads(resources.files("stormbuffer.evaluation").joinpath("corpus.json").read_text("utf-8"))
    records = [f"{record['title']}\n{record['body']}" for record in corpus["records"]]
    queries = [query["query"] for query in corpus["queries"]]
    expected = plain(stored, model_config, records + queries)
    actual = wq8.embed(records + queries)
    assert np.sum(actual * expected, axis=1).min() >= 0.99999

    def top10(vectors: np.ndarray) -> list[list[int]]:
        scores = vectors[len(records) :] @ vectors[: len(records)].T
        return np.argsort(-scores, axis=1, kind="stable")[:, :10].tolist()

    assert top10(actual) == top10(expected)


def test_a_store_embedded_by_the_previous_graph_is_embedded_again(tmp_path: Path, wq8: Embedder) -> None:
    store: StorePaths = make_store(tmp_path)
    for number in range(3):
        write_record(store, f"Pump {number}", f"Pump station {number} runs its backup generator every Sunday.")
    first = sync_store(store, wq8)
    assert first.embedded == 3 and first.vector_failure is None
    with sqlite3.connect(store.index_path) as conn:
        fresh = dict(conn.execute("SELECT embed_hash, vector FROM vectors"))
        previous = _built_recipe("wq8") | {"graph_version": GRAPH_VERSION - 1}
        identity = json.loads(pj.model_identity(wq8))
        identity["model_version"] = f"onnx-wq8/sha256:{recipe_checksum(previous)[:16]}"
        assert identity["model_version"] != wq8.model_version
        conn.execute("UPDATE vectors SET vector = zeroblob(length(vector))")  # the old graph's vectors
        conn.execute("UPDATE metadata SET value = ? WHERE key = ?", (json.dumps(identity, sort_keys=True),
                                                                     pj.VECTOR_MODEL))  # fmt: skip
    again = sync_store(store, wq8)
    assert again.embedded == 3 and again.vector_failure is None
    with sqlite3.connect(store.index_path) as conn:
        assert dict(conn.execute("SELECT embed_hash, vector FROM vectors")) == fresh
        (model,) = conn.execute("SELECT value FROM metadata WHERE key = ?", (pj.VECTOR_MODEL,)).fetchone()
    assert model == pj.model_identity(wq8)

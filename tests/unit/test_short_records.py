"""The short records of the million-record benchmark (bench/short_records.py): one chunk each, no
sentence vectors, and each chunk's precomputed vector the real model's own."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from stormbuffer.core.codec import parse_markdown, render_markdown
from stormbuffer.embedding.embedder import Embedder
from stormbuffer.index.chunking import chunk_body, own_sentences
from stormbuffer.index.sync import _chunk_vectors

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from short_records import Precomputed, embed_texts, make_short_record, sentence_records  # noqa: E402

TURN = (
    "We moved the nightly backup to the replica after the primary ran out of disk. "
    "The restore drill on Friday took forty minutes end to end. "
    "ok. "
    "Next time, page the storage owner before the window opens so that nobody waits."
)
LONG = " ".join(["This sentence keeps going with many more words than a short memory should ever hold"] * 4)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A tiny data set shaped like the shared benchmark data: one haystack turn and one abstract."""
    (tmp_path / "longmemeval").mkdir()
    (tmp_path / "scifact").mkdir()
    turns = [{"role": "user", "content": TURN}, {"role": "assistant", "content": LONG}]
    item = {"haystack_dates": ["2023/05/20 (Sat) 02:21"], "haystack_sessions": [turns]}
    (tmp_path / "longmemeval" / "longmemeval_s.subset100.seed0.json.gz").write_bytes(
        gzip.compress(json.dumps([item]).encode())
    )
    abstract = {"_id": "7", "title": "Backups at scale", "text": TURN}  # the same sentences again: kept once
    (tmp_path / "scifact" / "corpus.jsonl.gz").write_bytes(gzip.compress((json.dumps(abstract) + "\n").encode()))
    return tmp_path


def test_records_are_distinct_short_sentences_then_pairs(data: Path) -> None:
    pairs = sentence_records(data)
    bodies = [body for _title, body in pairs]
    assert len(bodies) == len(set(bodies))
    assert all(40 <= len(body) <= 300 for body in bodies)
    singles = {
        "We moved the nightly backup to the replica after the primary ran out of disk.",
        "The restore drill on Friday took forty minutes end to end.",
        "ok. Next time, page the storage owner before the window opens so that nobody waits.",  # a short piece joins
    }
    assert set(bodies[:3]) == singles  # the single sentences come first, then pairs of adjacent ones
    assert bodies[3:] and all(body.split(". ", 1)[0] + "." in singles for body in bodies[3:])
    assert not any("keeps going" in body for body in bodies)  # too long for a short record
    assert {title for title, _body in pairs} == {"2023/05/20 (Sat) 02:21 user"}  # first seen


def test_a_short_record_is_one_chunk_without_sentence_vectors(data: Path, embedder: Embedder) -> None:
    for index, pair in enumerate(sentence_records(data)):
        record = make_short_record(index, "project:x", pair)
        assert parse_markdown(render_markdown(record)) == record
        chunks = chunk_body(record.title, record.body, count_tokens=embedder.token_count)
        assert len(chunks) == 1
        assert own_sentences(chunks[0].text) == []


def test_precomputed_vectors_are_the_models_own(data: Path, embedder: Embedder) -> None:
    pairs = sentence_records(data)
    texts = embed_texts(pairs, embedder.token_count)
    precomputed = Precomputed(embedder, pairs, embedder.embed(texts))
    record = make_short_record(1, "project:x", pairs[1])
    chunk = chunk_body(record.title, record.body, count_tokens=embedder.token_count)[0]
    matrix, sentences = _chunk_vectors(precomputed, [(chunk.embed_text, chunk.text)])
    assert sentences == [None]
    np.testing.assert_allclose(matrix[0], embedder.embed([chunk.embed_text])[0], atol=1e-6)
    with pytest.raises(SystemExit, match="no cached vector"):
        precomputed.embed(["a text that is no short record's chunk"])

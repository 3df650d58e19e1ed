"""The lexical postings against real projections: exact BM25 over stemmed, field-weighted terms, prefixes of
unknown terms, and upkeep through every kind of change."""

from __future__ import annotations

import math
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stormbuffer.core.stores import StorePaths
from stormbuffer.index import kept_chunks, postings
from stormbuffer.index import projection as pj
from stormbuffer.index.postings import FIELD_WEIGHTS, IDF_FLOOR, K1, B, Stats, problem, rank, terms
from stormbuffer.index.sync import reindex_store, sync_store
from tests.stores import make_store, write_record

TEXT = kept_chunks.retrieval_text("chunks")  # each chunk's whole retrieval text
WORDS = ["alpha", "alps", "beta", "bet", "gamma", "delta", "x", "xenon", "über", "überall"]


def reference_bm25(texts: dict[int, str], query: list[str]) -> dict[int, float]:
    """Chunk id → BM25, written out plainly: each line of a retrieval text up to the sixth is a field
    whose words count `FIELD_WEIGHTS` times; each distinct query term matches itself, or, when no
    chunk has it, as a prefix (one ASCII letter: never); terms in half of the chunks or more dropped
    while rarer ones remain."""
    words: dict[int, list[tuple[str, int]]] = {}  # chunk -> (term, weight) per occurrence
    for chunk, text in texts.items():
        fields = zip(text.split("\n", 5), FIELD_WEIGHTS, strict=False)  # a text may lack trailing fields
        words[chunk] = [(term, weight) for field, weight in fields for term in terms(field)]
    length = {chunk: sum(weight for _, weight in w) for chunk, w in words.items()}
    average = sum(length.values()) / len(words)
    vocabulary = {term for w in words.values() for term, _ in w}

    def hits(term: str, word: str) -> bool:
        if term in vocabulary:
            return word == term
        return not (len(term) == 1 and term.isascii()) and word.startswith(term)

    found = {
        term: {c: n for c, w in words.items() if (n := sum(weight for x, weight in w if hits(term, x)))}
        for term in dict.fromkeys(query)
    }
    found = {term: chunks for term, chunks in found.items() if chunks}
    rarer = {term: chunks for term, chunks in found.items() if 2 * len(chunks) < len(texts)}
    scores: Counter[int] = Counter()
    for chunks in (rarer or found).values():
        idf = max(IDF_FLOOR, math.log((len(texts) - len(chunks) + 0.5) / (len(chunks) + 0.5)))
        for chunk, count in chunks.items():
            norm = K1 * (1 - B + B * length[chunk] / average)
            scores[chunk] += idf * count * (K1 + 1) / (count + norm)
    return dict(scores)


def chunk_texts(paths: StorePaths) -> dict[int, str]:
    with pj.reading(paths.index_path) as conn:
        return dict(conn.execute(f"SELECT id, {TEXT} FROM chunks"))


bodies = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(bodies, min_size=1, max_size=8),
    st.lists(st.sampled_from([*WORDS, "al", "ü", "b"]), min_size=1, max_size=4),
)
def test_rank_is_exactly_bm25_over_weighted_terms(texts: list[str], query: list[str]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        paths = make_store(Path(directory))
        for n, text in enumerate(texts):
            write_record(paths, f"Record {n} {text.split()[0]}", text)  # the title field counts too
        sync_store(paths)
        expected = reference_bm25(chunk_texts(paths), query)
        with pj.reading(paths.index_path) as conn:
            stats = Stats.of(pj.get_settings(conn))
            ids, scores = rank(conn, query, stats, 1000)
            assert problem(conn) is None
        got = dict(zip(ids.tolist(), scores.tolist(), strict=True))
        assert got.keys() == expected.keys()
        for chunk, score in expected.items():
            assert math.isclose(got[chunk], score, rel_tol=1e-9)
        order = sorted(expected, key=lambda chunk: (-got[chunk], chunk))
        assert ids.tolist() == order
        for limit in (1, 2, 3):
            with pj.reading(paths.index_path) as conn:
                assert rank(conn, query, stats, limit)[0].tolist() == order[:limit]


def test_every_kind_of_change_keeps_the_postings_those_of_a_rebuild(tmp_path: Path) -> None:
    paths = make_store(tmp_path)
    kept = write_record(paths, "Kept", "alpha beta gamma")
    edited = write_record(paths, "Edited", "delta delta xenon")
    gone = write_record(paths, "Gone", "überall alps")
    sync_store(paths)
    target = paths.records / f"{edited.id}.md"
    target.write_text(target.read_text().replace("delta delta xenon", "gamma bet\n\n## Second\n\nalpha again"))
    (paths.records / f"{gone.id}.md").unlink()
    (paths.records / f"{kept.id}.md").rename(paths.records / "kept-renamed.md")
    write_record(paths, "New", "brand new words for beta")
    report = sync_store(paths)
    assert report.indexed == 3 and report.removed == 1
    with pj.reading(paths.index_path) as conn:
        assert problem(conn) is None
        stats = Stats.of(pj.get_settings(conn))
        assert stats.chunks == conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM postings WHERE term = 'überall'").fetchone()[0] == 0
        before = dict(conn.execute("SELECT term, entries FROM postings"))
    reindex_store(paths)
    with pj.reading(paths.index_path) as conn:
        assert problem(conn) is None
        rebuilt = dict(conn.execute("SELECT term, entries FROM postings"))
    assert before.keys() == rebuilt.keys()  # chunk ids differ after a rebuild; the terms do not


def test_damaged_postings_are_reported(tmp_path: Path) -> None:
    paths = make_store(tmp_path)
    write_record(paths, "Note", "alpha beta")
    sync_store(paths)
    conn = pj.connect(paths.index_path, writer=True)
    try:
        conn.execute("DELETE FROM postings WHERE term = 'alpha'")
    finally:
        conn.close()
    with pj.reading(paths.index_path) as reader:
        assert problem(reader) == "postings differ"


def test_a_large_forget_finds_the_removed_terms_in_the_postings_when_they_are_smaller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = make_store(tmp_path)
    write_record(paths, "Kept", "alpha beta gamma")
    body = "".join(f"{n % 97}: alpha retried delta after xenon, then beta\n" for n in range(30_000))
    assert len(body) > postings.SWEEP_FROM
    large = write_record(paths, "Pasted log", body)
    sync_store(paths)
    with pj.reading(paths.index_path) as conn:
        stats = Stats.of(pj.get_settings(conn))
        texts = [text for (text,) in conn.execute(f"SELECT {TEXT} FROM chunks WHERE record_id = ?", (large.id,))]
        removed = dict(conn.execute(f"SELECT id, {TEXT} FROM chunks WHERE record_id = ?", (large.id,)).fetchall())
        assert postings._swept(conn, removed) == postings._terms_of(texts)  # the same terms and length either way

    def split(texts: object) -> tuple[set[str], int]:
        raise AssertionError("the removed texts were split")

    monkeypatch.setattr(postings, "_terms_of", split)
    (paths.records / f"{large.id}.md").unlink()
    assert sync_store(paths).removed == 1
    with pj.reading(paths.index_path) as conn:
        assert problem(conn) is None
        assert Stats.of(pj.get_settings(conn)).chunks == 1 < stats.chunks


def test_a_saturated_length_in_the_postings_leaves_the_removed_terms_to_the_texts(tmp_path: Path) -> None:
    paths = make_store(tmp_path)
    body = "".join(f"{n % 13}: alpha retried delta\n" for n in range(60_000))
    large = write_record(paths, "Pasted log", body)
    sync_store(paths)
    conn = pj.connect(paths.index_path, writer=True)
    try:
        removed = dict(conn.execute(f"SELECT id, {TEXT} FROM chunks WHERE record_id = ?", (large.id,)).fetchall())
        assert postings._swept(conn, removed) is not None
        entries = np.frombuffer(conn.execute("SELECT entries FROM postings WHERE term = 'alpha'").fetchone()[0],
                                dtype=postings.entry_dtype()).copy()  # fmt: skip
        entries["length"][0] = postings.MAX_COUNT
        conn.execute("UPDATE postings SET entries = ? WHERE term = 'alpha'", (entries.tobytes(),))
        assert postings._swept(conn, removed) is None
    finally:
        conn.close()


def record_texts(conn: sqlite3.Connection, record_id: str) -> dict[int, str]:
    """Chunk id → retrieval text of a record's chunks."""
    return dict(conn.execute(f"SELECT id, {TEXT} FROM chunks WHERE record_id = ?", (record_id,)).fetchall())

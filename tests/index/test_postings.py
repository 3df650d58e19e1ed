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


def test_chunks_any_writer_inserts_updates_and_deletes_reach_the_postings_at_the_next_fold(tmp_path: Path) -> None:
    """New chunks are found by their ids, not logged: rows inserted by plain SQL, some updated or deleted
    before the fold, some deleted after it, leave the postings exactly those of the chunks there are."""
    paths = make_store(tmp_path)
    note = write_record(paths, "Note", "alpha beta")
    sync_store(paths)
    conn = pj.connect(paths.index_path, writer=True)
    try:
        row = ("", 0, None, "", "", "Note\n\n\n\nnote.md\n", 0, 0, "hash")
        rows = [(note.id, 10 + n, None, text, "", row[5] + text, 0, len(text.split()), f"h{n}")
                for n, text in enumerate(["gamma delta", "epsilon zeta", "eta theta", "iota kappa"])]  # fmt: skip
        conn.execute("BEGIN IMMEDIATE")
        kept_chunks.insert(conn, rows)
        conn.execute("UPDATE chunks SET text = 'lambda mu', retrieval_text = ? WHERE ordinal = 11", (row[5],))
        conn.execute("DELETE FROM chunks WHERE ordinal = 12")
        assert problem(conn) == "unapplied changes"
        postings.apply_changes(conn)
        assert problem(conn) is None
        conn.execute("COMMIT")
        assert not conn.execute("SELECT count(*) FROM postings WHERE term IN ('epsilon', 'eta')").fetchone()[0]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE chunks SET text = 'nu xi', retrieval_text = ? WHERE ordinal = 10", (row[5],))
        conn.execute("DELETE FROM chunks WHERE ordinal = 13")
        kept_chunks.insert(conn, [(*rows[0][:1], 14, None, "omicron", "", row[5] + "omicron", 0, 1, "h5")])
        postings.apply_changes(conn)
        conn.execute("COMMIT")
        assert problem(conn) is None
        assert conn.execute("SELECT count(*) FROM postings WHERE term IN ('gamma', 'iota')").fetchone()[0] == 0
        found = "SELECT count(*) FROM postings WHERE term IN ('nu', 'lambda', 'omicron')"
        assert conn.execute(found).fetchone()[0] == 3
    finally:
        conn.close()


_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.lists(bodies, min_size=1, max_size=4)),
        st.tuples(st.just("update"), st.integers(0, 50), bodies),
        st.tuples(st.just("delete"), st.integers(0, 50)),
        st.tuples(st.just("fold")),
    ),
    max_size=12,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_STEPS)
def test_the_postings_are_those_of_the_chunks_after_any_writes_folded_at_any_points(steps: list[tuple]) -> None:
    """Chunk rows inserted, updated and deleted by plain SQL in any order, folded (and committed) at
    any points: after the last fold the postings and statistics are exactly those of a recount."""
    with tempfile.TemporaryDirectory() as directory:
        paths = make_store(Path(directory))
        note = write_record(paths, "Note", "alpha beta")
        sync_store(paths)
        conn = pj.connect(paths.index_path, writer=True)
        try:
            prefix = "Note\n\n\n\nnote.md\n"
            ordinal = 100
            conn.execute("BEGIN IMMEDIATE")
            for step in steps:
                ids = [chunk for (chunk,) in conn.execute("SELECT id FROM chunks ORDER BY id")]
                if step[0] == "insert":
                    rows = [(note.id, ordinal + n, None, text, "", prefix + text, 0, len(text.split()), "h")
                            for n, text in enumerate(step[1])]  # fmt: skip
                    kept_chunks.insert(conn, rows)
                    ordinal += len(rows)
                elif step[0] == "update" and ids:
                    conn.execute("UPDATE chunks SET text = ?, retrieval_text = ? WHERE id = ?",
                                 (step[2], prefix, ids[step[1] % len(ids)]))  # fmt: skip
                elif step[0] == "delete" and ids:
                    conn.execute("DELETE FROM chunks WHERE id = ?", (ids[step[1] % len(ids)],))
                elif step[0] == "fold":
                    postings.apply_changes(conn)
                    conn.execute("COMMIT")
                    assert problem(conn) is None
                    conn.execute("BEGIN IMMEDIATE")
            postings.apply_changes(conn)
            conn.execute("COMMIT")
            assert problem(conn) is None
        finally:
            conn.close()


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

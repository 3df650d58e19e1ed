"""The write path's chunks and postings are exactly what the plain definitions give: chunking a
varied set of bodies reproduces the chunks recorded in `tests/fixtures/chunking/digests.json` (made by
the line-by-line chunker), and the postings and statistics a projection keeps through adds, edits and
forgets are those of a term-by-term count of its chunks."""

from __future__ import annotations

import hashlib
import json
import random
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
import Stemmer

from stormbuffer.core.ids import new_record_id
from stormbuffer.core.records import Record, Source
from stormbuffer.core.repository import Repository
from stormbuffer.core.stores import StorePaths
from stormbuffer.core.timestamps import Timestamp
from stormbuffer.index import kept_chunks, postings
from stormbuffer.index import projection as pj
from stormbuffer.index.chunking import VECTOR_CHUNKS, approximate_token_count, chunk_body
from stormbuffer.index.postings import FIELD_WEIGHTS, MAX_COUNT, STATS, _Accumulator, problem
from stormbuffer.index.sync import record_chunks, sync_store, token_counter
from tests.stores import make_store

DIGESTS = Path(__file__).parents[1] / "fixtures" / "chunking" / "digests.json"
UNICODE = ["über", "İstanbul", "ﬁle", "naïve", "東京都", "Straße", "ΣΊΣΥΦΟΣ", "x_y", "v1.2.3", "İİ"]
PLAIN = "deploy retry cache node timeout request latency worker queue shard replica the a of".split()
# (max_tokens, max_words, exact_chunks) the bodies are cut with
Postings = tuple[dict[str, list[tuple[str, int, int, int]]], dict[str, int]]  # see `plain_postings`
SOURCE = Source("conversation", "test", "agent")
LIMITS = [(256, 160, None), (256, 160, VECTOR_CHUNKS), (64, 40, None), (48, 30, 3)]


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(PLAIN + UNICODE) if rng.random() < 0.9 else f"{rng.random():.5f}" for _ in range(count))


def _line(rng: random.Random) -> str:
    """One line of a markdown-ish body: text, headings, fences, list items, blanks and odd cases."""
    kind = rng.randrange(20)
    if kind < 8:
        return _words(rng, rng.choice([1, 3, 9, 20, 45]))
    return [
        lambda: "#" * rng.randint(1, 7) + rng.choice([" ", "\t", ""]) + _words(rng, 3) + rng.choice(["", " ##", "#"]),
        lambda: rng.choice(["```", "~~~", "  ```python", "````"]),
        lambda: rng.choice(["- ", "* ", "+\t", "1. ", "12) ", "Dr. ", "e.g. "]) + _words(rng, 6),
        lambda: "",
        lambda: rng.choice(["   ", "\t", "\r"]),
        lambda: _words(rng, 5) + "\r",
        lambda: _words(rng, 400),  # a single line over any word limit
        lambda: "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef0123456789+/") for _ in range(900)),
        lambda: _words(rng, 7) + ". " + _words(rng, 6) + "! " + _words(rng, 4) + "?",
        lambda: "    " + _words(rng, 4),
        lambda: "# ",
        lambda: "~~~" if rng.random() < 0.5 else "```",
    ][kind - 8]()


def bodies() -> dict[str, str]:
    """Named bodies: seeded markdown-ish documents, a pasted log, and a few edge cases."""
    found = {}
    for seed in range(24):
        rng = random.Random(seed)
        found[f"mixed-{seed}"] = "\n".join(_line(rng) for _ in range(rng.choice([5, 40, 200, 600])))
    rng = random.Random(99)
    found["log"] = "\n".join(f"2026-03-{n % 28 + 1:02d}T10:{n % 60:02d} {_words(rng, 9)}." for n in range(4000)) + "\n"
    found["one-paragraph"] = " ".join(_words(rng, 30) for _ in range(200))
    found["headings-only"] = "# One\n## Two\n### Three ###\n"
    found["crlf"] = "# Title\r\n\r\nSome text\r\nmore text\r\n\r\n- item\r\n"
    found["blank"] = "\n \n\t\n"
    return found


def chunk_digest(body: str, limits: tuple[int, int, int | None]) -> str:
    max_tokens, max_words, exact = limits
    chunks = chunk_body("A title " + body[:20], body, count_tokens=approximate_token_count,
                        max_tokens=max_tokens, max_words=max_words, exact_chunks=exact)  # fmt: skip
    rows = [[c.ordinal, c.heading, c.text, c.embed_text, c.word_count] for c in chunks]
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode()).hexdigest()


def all_digests() -> dict[str, str]:
    return {f"{name} {limits}": chunk_digest(body, limits) for name, body in bodies().items() for limits in LIMITS}


@pytest.mark.parametrize("name", sorted(bodies()))
def test_chunks_are_those_of_the_line_by_line_chunker(name: str) -> None:
    expected = json.loads(DIGESTS.read_text(encoding="utf-8"))
    body = bodies()[name]
    for limits in LIMITS:
        assert chunk_digest(body, limits) == expected[f"{name} {limits}"], limits


def plain_postings(conn: sqlite3.Connection) -> Postings:
    """Term → (record id, ordinal, weighted count, weighted length) of every chunk with it, and the
    statistics, counted word by word from the chunks' retrieval texts."""
    stem = Stemmer.Stemmer("english").stemWord
    found: dict[str, list[tuple[str, int, int, int]]] = {}
    chunks, total = 0, 0
    rows = conn.execute(f"SELECT record_id, ordinal, {kept_chunks.retrieval_text('chunks')} FROM chunks ORDER BY id")
    for record_id, ordinal, text in rows:
        counts: Counter[str] = Counter()
        length = 0
        for field, weight in zip(text.split("\n", 5), FIELD_WEIGHTS, strict=False):
            for word in re.findall(r"\w+", field):
                counts[stem(word.lower())] += weight
                length += weight
        chunks, total = chunks + 1, total + length
        for term, count in counts.items():
            found.setdefault(term, []).append((record_id, ordinal, min(count, MAX_COUNT), min(length, MAX_COUNT)))
    return found, {"chunks": chunks, "terms": total}


def stored_postings(conn: sqlite3.Connection) -> Postings:
    """The projection's postings with chunk ids named by (record id, ordinal), and its statistics."""
    import numpy as np

    names = dict((row[0], (row[1], row[2])) for row in conn.execute(
        "SELECT id, record_id, ordinal FROM chunks"))  # fmt: skip
    entry = np.dtype([("chunk", "<i4"), ("count", "<u2"), ("length", "<u2")])
    found = {}
    for term, packed in conn.execute("SELECT term, entries FROM postings"):
        entries = np.frombuffer(packed, dtype=entry)
        assert list(entries["chunk"]) == sorted(entries["chunk"])
        found[term] = [(*names[int(e["chunk"])], int(e["count"]), int(e["length"])) for e in entries]
    return found, json.loads(pj.get_setting(conn, STATS) or "{}")


# 37: new entries grouped in many folds; sweep: removed chunks' terms read from the postings, not their texts
@pytest.mark.parametrize(("fold", "sweep"), [(_Accumulator.FOLD, False), (37, False), (_Accumulator.FOLD, True)])
def test_postings_through_adds_edits_and_forgets_are_the_plain_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fold: int, sweep: bool
) -> None:
    monkeypatch.setattr(_Accumulator, "FOLD", fold)
    if sweep:
        monkeypatch.setattr(postings, "SWEEP_FROM", 0)
        monkeypatch.setattr(postings, "SPLIT_NS_PER_CHAR", 10**9)
    paths = make_store(tmp_path)
    repo = Repository(paths)
    scope = repo.scope
    texts = bodies()
    names = ["mixed-3", "mixed-7", "log", "crlf", "one-paragraph", "mixed-11", "headings-only"]
    now = Timestamp.now()
    added = {}
    for name in names:
        record = Record(new_record_id(), f"Über {name} ΣΊΣΥΦΟΣ", "fact", scope, "active", "agent", now, now,
                        tags=("ops", name), aliases=("İstanbul notes",), sources=(SOURCE,),
                        body=texts[name])  # fmt: skip
        added[name] = repo.add(record)

    def check() -> None:
        with pj.reading(paths.index_path) as conn:
            assert problem(conn) is None
            assert stored_postings(conn) == plain_postings(conn)

    check()
    for name, other in [("log", "mixed-5"), ("mixed-3", "mixed-3"), ("crlf", "blank")]:
        current = repo.find(added[name].id)
        edited = current.record.replace(body=texts[other] + "\nedited", updated_at=Timestamp.now())
        repo.replace_if_unchanged(current, edited)
        check()
    for name in ["log", "mixed-7"]:
        repo.forget(added[name].id)
        check()


def chunk_rows(paths: StorePaths, record_id: str) -> list[tuple]:
    """(id, then the values `record_chunks` makes) of a record's stored chunks, by ordinal."""
    with pj.reading(paths.index_path) as conn:
        return conn.execute(
            f"SELECT id, record_id, ordinal, heading, text, embed_text, {kept_chunks.retrieval_text('chunks')}, "
            "token_count, word_count, embed_hash FROM chunks WHERE record_id = ? ORDER BY ordinal",
            (record_id,)).fetchall()  # fmt: skip


def test_an_edit_keeps_the_chunks_it_did_not_change(tmp_path: Path) -> None:
    """Appending a line, removing a paragraph (later chunks move up), editing the file by hand (sync)
    and re-tagging: each time the stored chunks are exactly a fresh chunking of the record, the
    postings exactly the plain count, and only chunks whose content changed get new ids."""
    paths = make_store(tmp_path)
    repo = Repository(paths)
    rng = random.Random(7)
    paragraphs = [_words(rng, 150) for _ in range(80)]  # one chunk each past the vector cap
    now = Timestamp.now()
    record = repo.add(Record(new_record_id(), "A long design note", "fact", repo.scope, "active", "agent", now, now,
                             tags=("design",), sources=(SOURCE,), body="\n\n".join(paragraphs)))  # fmt: skip
    count = token_counter(paths)

    def edited(**changes: object) -> tuple[list[tuple], list[tuple]]:
        """Replace the record through the repository; its chunk rows before and after."""
        before = chunk_rows(paths, record.id)
        current = repo.find(record.id)
        repo.replace_if_unchanged(current, current.record.replace(updated_at=Timestamp.now(), **changes))
        return before, checked()

    def checked() -> list[tuple]:
        after = chunk_rows(paths, record.id)
        current = repo.find(record.id)
        fresh = record_chunks(current.record, current.path.relative_to(paths.root).as_posix(), count)
        assert [row[1:] for row in after] == [tuple(row) for row in fresh]
        with pj.reading(paths.index_path) as conn:
            assert problem(conn) is None
            assert stored_postings(conn) == plain_postings(conn)
        return after

    added = _words(rng, 20)  # too long to join the last paragraph's chunk
    before, after = edited(body="\n\n".join([*paragraphs, added]))
    assert [row[0] for row in after[:-1]] == [row[0] for row in before] and after[-1][4] == added

    gone = paragraphs.pop(70)  # past the vector cap: one chunk, the later ones move up
    before, after = edited(body="\n\n".join([*paragraphs, added]))
    assert [row[0] for row in after] == [row[0] for row in before if row[4] != gone]
    assert len(after) == len(before) - 1 and [row[2] for row in after] == list(range(len(after)))

    path = repo.find(record.id).path
    rewritten = _words(rng, 150)
    path.write_text(path.read_text(encoding="utf-8").replace(paragraphs[75], rewritten), encoding="utf-8")
    before = after
    sync_store(paths)
    after = checked()
    changed = [(old[4], new[4]) for old, new in zip(before, after, strict=True) if old[0] != new[0]]
    assert changed == [(paragraphs[75], rewritten)]

    before, after = edited(tags=("design", "retagged"))  # every chunk's retrieval text changes
    assert not {row[0] for row in before} & {row[0] for row in after}


# The change-logging triggers of projections made before retrieval texts were stored without the chunk text
OLD_TRIGGERS = {
    "chunks_lexical_insert": "CREATE TRIGGER chunks_lexical_insert AFTER INSERT ON chunks BEGIN "
    "INSERT INTO lexical_changes(chunk, added, text) VALUES (new.id, 1, NULL); END",
    "chunks_lexical_delete": "CREATE TRIGGER chunks_lexical_delete AFTER DELETE ON chunks BEGIN "
    "INSERT INTO lexical_changes(chunk, added, text) VALUES (old.id, 0, old.retrieval_text); END",
    "chunks_lexical_update": "CREATE TRIGGER chunks_lexical_update AFTER UPDATE OF retrieval_text ON chunks BEGIN "
    "INSERT INTO lexical_changes(chunk, added, text) VALUES (old.id, 0, old.retrieval_text); "
    "INSERT INTO lexical_changes(chunk, added, text) VALUES (new.id, 1, NULL); END",
}


def test_a_chunk_text_is_stored_once_and_old_whole_rows_still_count(tmp_path: Path) -> None:
    """New rows keep only the retrieval prefix beside the chunk text; a projection written before (whole
    retrieval texts, the old triggers, the legacy version) is used as it is: the next writer renews its
    triggers and stamps today's version (which older versions rebuild rather than misread), and its
    postings stay the plain count through edits and forgets of old and new rows alike."""
    paths = make_store(tmp_path)
    repo = Repository(paths)
    texts = bodies()
    now = Timestamp.now()
    added = [repo.add(Record(new_record_id(), f"Note {name}", "fact", repo.scope, "active", "agent", now, now,
                             tags=("ops",), sources=(SOURCE,), body=texts[name]))
             for name in ["mixed-3", "log", "crlf", "mixed-7"]]  # fmt: skip
    whole = kept_chunks.retrieval_text("chunks")
    with pj.reading(paths.index_path) as conn:
        sums = f"SELECT sum(length(retrieval_text)), sum(length(text)), sum(length({whole})) FROM chunks"
        stored, text, read = conn.execute(sums).fetchone()
    assert stored < text < read  # the prefixes alone are stored
    conn = pj.connect(paths.index_path, writer=True)
    try:  # make it a projection of before: whole retrieval texts, the old triggers
        conn.execute("BEGIN IMMEDIATE")
        for name in OLD_TRIGGERS:
            conn.execute(f"DROP TRIGGER IF EXISTS {name}")
        conn.execute(f"UPDATE chunks SET retrieval_text = {whole}")
        for statement in OLD_TRIGGERS.values():
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {pj.LEGACY_VERSIONS[0]}")
        conn.execute("COMMIT")
    finally:
        conn.close()
    with pj.reading(paths.index_path) as conn:
        assert conn.execute(f"SELECT count(*) FROM chunks WHERE retrieval_text != {whole}").fetchone()[0] == 0
        assert conn.execute("SELECT sum(length(retrieval_text)) FROM chunks").fetchone()[0] == read
        assert conn.execute("PRAGMA user_version").fetchone()[0] == pj.LEGACY_VERSIONS[0]  # read as it is
    current = repo.find(added[1].id)
    repo.replace_if_unchanged(current, current.record.replace(body=texts["mixed-5"], updated_at=Timestamp.now()))
    repo.forget(added[0].id)
    with pj.reading(paths.index_path) as conn:
        triggers = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall())
        assert {name: sql for name, sql in triggers.items() if name.startswith("chunks_lexical")} == postings._TRIGGERS
        assert conn.execute("PRAGMA user_version").fetchone()[0] == pj.PROJECTION_VERSION
        assert problem(conn) is None
        assert stored_postings(conn) == plain_postings(conn)
    for record in added[2:]:
        repo.forget(record.id)
    with pj.reading(paths.index_path) as conn:
        assert problem(conn) is None
        assert stored_postings(conn) == plain_postings(conn)


def test_a_layout_8_projection_with_an_unapplied_logged_insert_is_upgraded_and_folds_it(tmp_path: Path) -> None:
    """A projection whose trigger logged each inserted chunk (layout 8) is read as it is; the next writer
    drops that trigger, counts the chunks there are as folded and still applies an insert left in the log."""
    paths = make_store(tmp_path)
    repo = Repository(paths)
    texts = bodies()
    now = Timestamp.now()
    first = repo.add(Record(new_record_id(), "Note log", "fact", repo.scope, "active", "agent", now, now,
                            sources=(SOURCE,), body=texts["log"]))  # fmt: skip
    conn = pj.connect(paths.index_path, writer=True)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(OLD_TRIGGERS["chunks_lexical_insert"])
        conn.execute("DELETE FROM metadata WHERE key = ?", (postings.THROUGH,))
        prefix = "Note log\n\n\n\nx.md\n"
        kept_chunks.insert(conn, [(first.id, 999, None, "quokka wombat", "", prefix + "quokka wombat", 0, 2, "h")])
        conn.execute("PRAGMA user_version = 8")
        conn.execute("COMMIT")  # the insert is logged, not applied
    finally:
        conn.close()
    with pj.reading(paths.index_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 8  # read as it is
        assert problem(conn) == "unapplied changes"
    repo.add(Record(new_record_id(), "Note crlf", "fact", repo.scope, "active", "agent", now, now,
                    sources=(SOURCE,), body=texts["crlf"]))  # fmt: skip
    with pj.reading(paths.index_path) as conn:
        triggers = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        assert "chunks_lexical_insert" not in triggers
        assert conn.execute("PRAGMA user_version").fetchone()[0] == pj.PROJECTION_VERSION
        assert problem(conn) is None
        assert stored_postings(conn) == plain_postings(conn)
        assert conn.execute("SELECT count(*) FROM postings WHERE term = 'quokka'").fetchone()[0] == 1


def test_a_retrieval_text_is_stored_whole_where_its_prefix_alone_would_be_ambiguous() -> None:
    row = ("id", 0, None, "text", "", "T\n\n\n\nnote.md\ntext", 0, 1, "hash")
    assert kept_chunks.stored(row)[5] == "T\n\n\n\nnote.md\n"
    prefix = "T\n\n\n\nnote.md\n"
    for text, retrieval in [("", prefix), ("\n", prefix + "\n"), ("md\n", prefix + "md\n")]:  # the prefix ends with it
        whole = (*row[:3], text, "", retrieval, *row[6:])
        assert kept_chunks.stored(whole) == whole
    conn = sqlite3.connect(":memory:")
    reads = [("T\n\n\n\nnote.md\n", "text"), ("T\n\n\n\nnote.md\ntext", "text"), ("P\n\n\n\nx\n", ""),
             ("P\n\n\n\nx\nz\x00é", "z\x00é"), ("P\n\n\n\nx\n", "z\x00é"), ("a", "longer than a")]  # fmt: skip
    read = kept_chunks.retrieval_text("c")
    found = [conn.execute(f"SELECT {read} FROM (SELECT ? AS retrieval_text, ? AS text) AS c", pair).fetchone()[0]
             for pair in reads]  # fmt: skip
    assert found == ["T\n\n\n\nnote.md\ntext", "T\n\n\n\nnote.md\ntext", "P\n\n\n\nx\n", "P\n\n\n\nx\nz\x00é",
                     "P\n\n\n\nx\nz\x00é", "alonger than a"]  # fmt: skip


if __name__ == "__main__":  # regenerate the digests (only from a chunker known to be right)
    DIGESTS.write_text(json.dumps(all_digests(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(Counter(len(b) // 10000 for b in bodies().values()))

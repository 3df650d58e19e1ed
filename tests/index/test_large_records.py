"""A record's indexing cost has a ceiling: only its first chunks reach the tokenizer and the model, the
rest is cut by words and searched lexically; a bounded sync embeds part of a backlog and the matrix
covers what has vectors; the backlog is embedded a step at a time, in the background of a
long-running process; forgetting a large record gives its pages back."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from stormbuffer.core.stores import StorePaths
from stormbuffer.embedding import Embedder
from stormbuffer.index import projection as pj
from stormbuffer.index.backlog import STEP, embed_backlog
from stormbuffer.index.chunking import MAX_WORDS, VECTOR_CHUNKS, chunk_body
from stormbuffer.index.freshness import StoreFreshness
from stormbuffer.index.gc import gc_store
from stormbuffer.index.sync import READ_EMBED_LIMIT, sync_store, vectors_current
from stormbuffer.retrieval import SearchOptions, search
from tests.matrices import assert_matrix_matches_projection
from tests.stores import make_store, write_record

DEEP = "The marmalade lighthouse keeper counts zebra crossings."


def log_lines(count: int) -> str:
    lines = [f"2026-01-{n % 28 + 1:02d} worker {n} retried the request after a timeout." for n in range(count)]
    lines[count * 9 // 10] = DEEP
    return "\n".join(lines) + "\n"


@pytest.fixture
def store(tmp_path: Path) -> StorePaths:
    return make_store(tmp_path)


def counted(calls: list[int]) -> object:
    def count(text: str) -> int:
        calls.append(len(text))
        return len(text.split()) + 2

    return count


@pytest.mark.parametrize("fenced", [False, True])
def test_the_tokenizer_sees_the_same_text_whatever_the_size_of_the_body(fenced: bool) -> None:
    small, large = log_lines(3_000), log_lines(30_000)
    if fenced:  # one atomic block: the worst case for the token cap
        small, large = f"```\n{small}```\n", f"```\n{large}```\n"
    seen: dict[int, list[int]] = {}
    for body in (small, large):
        calls: list[int] = []
        chunks = chunk_body("Log", body, count_tokens=counted(calls), exact_chunks=VECTOR_CHUNKS)  # type: ignore[arg-type]
        seen[len(body)] = calls
        assert " ".join(chunk.text for chunk in chunks).split() == body.split()  # every word, in order
        assert [chunk.ordinal for chunk in chunks] == list(range(len(chunks)))
        assert all(chunk.word_count <= MAX_WORDS for chunk in chunks[VECTOR_CHUNKS:])
    small_calls, large_calls = seen[len(small)], seen[len(large)]
    assert len(large_calls) == len(small_calls)  # the cost of fitting does not grow with the body
    assert sum(large_calls) <= sum(small_calls) + 16 * len(large)  # a word count of a long text at most


def test_only_a_records_first_chunks_get_vectors_and_the_rest_is_found_lexically(
    store: StorePaths, embedder: Embedder
) -> None:
    record = write_record(store, "Pasted worker log", log_lines(4_000))
    report = sync_store(store, embedder)
    assert report.vector_failure is None and report.pending == 0 and report.embedded == VECTOR_CHUNKS
    with sqlite3.connect(store.index_path) as conn:
        chunks, embedded, tokens = conn.execute(
            "SELECT count(*), count(v.embed_hash), sum(c.token_count > 0) FROM chunks AS c "
            "LEFT JOIN vectors AS v ON v.embed_hash = c.embed_hash WHERE c.record_id = ?",
            (record.id,),
        ).fetchone()
    assert chunks > 4 * VECTOR_CHUNKS and embedded == tokens == VECTOR_CHUNKS
    assert assert_matrix_matches_projection(store).size == VECTOR_CHUNKS
    assert vectors_current(store, embedder)
    hits = search([store], "marmalade lighthouse keeper", SearchOptions(limit=3), embedder=embedder)
    assert hits and hits[0].record_id == record.id and DEEP in hits[0].text


def test_a_bounded_sync_embeds_a_little_and_the_backlog_is_embedded_a_step_at_a_time(
    store: StorePaths, embedder: Embedder
) -> None:
    for number in range(READ_EMBED_LIMIT + 2 * STEP + 3):
        write_record(store, f"Ferry {number}", f"Ferry {number} leaves the harbour at dawn.")
    first = sync_store(store, embedder, embed_limit=READ_EMBED_LIMIT)
    assert (first.embedded, first.pending) == (READ_EMBED_LIMIT, 2 * STEP + 3)
    assert first.vector_failure == "vector_projection_incomplete"
    assert not vectors_current(store, embedder)
    assert assert_matrix_matches_projection(store).size == READ_EMBED_LIMIT  # what exists is searchable
    assert pj.describe(store)["vectors_pending"] == 2 * STEP + 3
    deferred = sync_store(store, embedder, embed_limit=READ_EMBED_LIMIT)  # more than the limit is left
    assert deferred.pending == 2 * STEP + 3 - READ_EMBED_LIMIT

    steps: list[tuple[int, int]] = []
    last = embed_backlog(store, embedder, progress=lambda _phase, done, total, _report: steps.append((done, total)))
    assert last.pending == 0 and last.vector_failure is None and vectors_current(store, embedder)
    assert [done for done, _total in steps] == sorted(done for done, _total in steps) and len(steps) >= 2
    assert pj.describe(store)["vectors_pending"] == 0
    assert_matrix_matches_projection(store)


def test_a_long_running_read_leaves_a_backlog_to_its_thread_and_answers_at_once(
    store: StorePaths, embedder: Embedder
) -> None:
    write_record(store, "Release rule", "Releases ship on Tuesdays.")
    fresh = StoreFreshness(store)
    try:
        assert fresh.sync(embedder) is not None and vectors_current(store, embedder)
        record = write_record(store, "Pasted worker log", log_lines(4_000))
        deadline = time.monotonic() + 30.0  # the watcher reports the new file within tens of milliseconds
        report = fresh.sync(embedder)
        while (report is None or not report.indexed) and time.monotonic() < deadline:
            time.sleep(0.05)
            report = fresh.sync(embedder)
        assert report is not None and report.embedded == 0 and report.pending == VECTOR_CHUNKS  # none inline
        hits = search([store], "marmalade lighthouse keeper", SearchOptions(limit=3), embedder=embedder)
        assert hits and hits[0].record_id == record.id
        deadline = time.monotonic() + 300.0  # a guard against a hung thread, never a speed assertion
        while (fresh.backlog.running or not vectors_current(store, embedder)) and time.monotonic() < deadline:
            time.sleep(0.2)  # the thread ends just after its last step made the vectors current
        assert vectors_current(store, embedder) and not fresh.backlog.running
        assert_matrix_matches_projection(store)
    finally:
        fresh.close()


def test_forgetting_a_large_record_gives_its_pages_back(store: StorePaths, embedder: Embedder) -> None:
    write_record(store, "Release rule", "Releases ship on Tuesdays.")
    large = write_record(store, "Pasted worker log", log_lines(20_000))
    sync_store(store, embedder)
    with sqlite3.connect(store.index_path) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == pj.INCREMENTAL_VACUUM
        full = conn.execute("PRAGMA page_count").fetchone()[0]
    (store.records / f"{large.id}.md").unlink()
    assert sync_store(store, embedder).removed == 1
    with sqlite3.connect(store.index_path) as conn:
        pages, free = (
            conn.execute("PRAGMA page_count").fetchone()[0],
            conn.execute("PRAGMA freelist_count").fetchone()[0],
        )
    assert free < pj.GIVE_BACK_PAGES and pages < full / 4


def test_a_writer_keeps_a_large_write_in_memory_and_a_reader_keeps_the_default(store: StorePaths) -> None:
    write_record(store, "Pasted worker log", log_lines(20_000))
    sync_store(store)
    writer, reader = pj.connect(store.index_path, writer=True), pj.connect(store.index_path)
    try:
        assert writer.execute("PRAGMA cache_size").fetchone()[0] == -65536
        assert writer.execute("PRAGMA temp_store").fetchone()[0] == 2  # memory
        default = sqlite3.connect(":memory:").execute("PRAGMA cache_size").fetchone()[0]
        assert reader.execute("PRAGMA cache_size").fetchone()[0] == default
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("DELETE FROM records")
        log = store.index_path.with_name(store.index_path.name + "-wal")
        logged = log.stat().st_size if log.exists() else 0
        writer.execute("ROLLBACK")
    finally:
        writer.close()
        reader.close()
    assert logged == 0  # the deleted record's pages stayed in the cache until the end of the transaction


def test_gc_gives_back_the_space_of_a_projection_made_before_incremental_vacuum(store: StorePaths) -> None:
    write_record(store, "Release rule", "Releases ship on Tuesdays.")
    large = write_record(store, "Pasted worker log", log_lines(20_000))
    sync_store(store)
    with sqlite3.connect(store.index_path) as conn:  # as an older version made it: no auto-vacuum
        conn.execute("PRAGMA auto_vacuum = NONE")
        conn.execute("VACUUM")
        full, page = (conn.execute(f"PRAGMA {name}").fetchone()[0] for name in ("page_count", "page_size"))
    (store.records / f"{large.id}.md").unlink()
    assert sync_store(store).removed == 1
    with pj.reading(store.index_path) as conn:
        assert pj.free_bytes(conn) > full * page // 2  # the pages stay in the file
    assert gc_store(store, dry_run=False).free_pages > 0
    with sqlite3.connect(store.index_path) as conn:
        mode, pages, free = (conn.execute(f"PRAGMA {name}").fetchone()[0]
                             for name in ("auto_vacuum", "page_count", "freelist_count"))  # fmt: skip
    assert (mode, free) == (pj.INCREMENTAL_VACUUM, 0) and pages < full / 4

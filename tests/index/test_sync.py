"""Incremental sync and reindex against real SQLite files: what is hashed, indexed, removed and rebuilt."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from stormbuffer.core.errors import IndexBusy, IndexUnavailable, StoreError
from stormbuffer.core.locks import exclusive_lock
from stormbuffer.core.stores import StorePaths, View
from stormbuffer.embedding import Embedder
from stormbuffer.index import projection as pj
from stormbuffer.index.chunking import chunk_body, sentence_spans
from stormbuffer.index.sync import FileList, refresh_vectors, reindex_store, scan_files, sync_store
from stormbuffer.retrieval import SearchOptions, search
from tests.helpers import lock_held_elsewhere
from tests.matrices import assert_matrix_matches_projection
from tests.stores import canonical_bytes, make_store, settle, write_record

LEXICAL = SearchOptions(mode="lexical")


@pytest.fixture
def store(tmp_path: Path) -> StorePaths:
    return make_store(tmp_path)


def test_the_scan_lists_markdown_files_in_every_real_directory_and_no_symlink(
    store: StorePaths, tmp_path: Path
) -> None:
    nested = store.records / "team" / "2026"
    nested.mkdir(parents=True)
    (store.records / "top.md").write_text("a")
    (nested / "deep.md").write_text("bb")
    (nested / "notes.txt").write_text("not a record")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "elsewhere.md").write_text("c")
    (store.records / "linked.md").symlink_to(outside / "elsewhere.md")
    (store.records / "linked-dir").symlink_to(outside, target_is_directory=True)
    found = scan_files(store)
    assert sorted(found) == ["records/team/2026/deep.md", "records/top.md"]
    info = (nested / "deep.md").stat()
    assert found["records/team/2026/deep.md"] == (info.st_size, info.st_mtime_ns, info.st_ino)


def test_the_files_digest_ignores_order_and_moves_on_by_each_change() -> None:
    listed = {f"records/r{number}.md": (number, 10 * number, 100 + number) for number in range(50)}
    files = FileList(dict(listed))
    assert files.fingerprint() == FileList(dict(reversed(listed.items()))).fingerprint()
    before = files.fingerprint()
    files.set("records/new.md", (1, 2, 3))
    files.set("records/r7.md", (7, 71, 107))  # a changed stat
    files.set("records/r9.md", None)  # a removed file
    after = {**listed, "records/new.md": (1, 2, 3), "records/r7.md": (7, 71, 107)}
    del after["records/r9.md"]
    assert files.fingerprint() == FileList(after).fingerprint() != before
    files.set("records/new.md", None)
    files.set("records/r7.md", listed["records/r7.md"])
    files.set("records/r9.md", listed["records/r9.md"])
    assert files.fingerprint() == before


def titles(paths: StorePaths, query: str) -> list[str]:
    return [hit.title for hit in search([paths], query, LEXICAL)]


def rows(paths: StorePaths, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(paths.index_path) as conn:
        return conn.execute(sql).fetchall()


def test_first_sync_indexes_then_a_second_skips_without_hashing(store: StorePaths) -> None:
    for n in range(3):
        write_record(store, f"Note {n}", f"Body of note number {n}.")
    first = sync_store(store)
    assert (first.indexed, first.skipped, first.removed, first.invalid_files) == (3, 0, 0, [])
    assert first.hashed == 3 and first.rebuilt
    second = sync_store(store)
    assert (second.indexed, second.skipped, second.removed, second.hashed) == (0, 3, 0, 0)
    assert not second.rebuilt
    assert rows(store, "PRAGMA user_version") == [(pj.PROJECTION_VERSION,)]


def test_an_unchanged_store_is_confirmed_from_one_digest_without_importing_sqlalchemy(store: StorePaths) -> None:
    for n in range(3):
        write_record(store, f"Note {n}", f"Body of note number {n}.")
    write_record(store, "Foreign", "Quasar text.", scope="project:other", file_name="foreign.md")
    first = sync_store(store)
    assert first.indexed == 3 and [name for name, _ in first.invalid_files] == ["foreign.md"]
    script = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from stormbuffer.core.stores import PlatformDirs, View, resolve_store
        from stormbuffer.index.sync import sync_store
        base = Path({str(store.root.parent.parent)!r})
        paths = resolve_store(View.PROJECT, base / "project", PlatformDirs(base / "data", base / "cache"))
        report = sync_store(paths)
        print(json.dumps([report.indexed, report.skipped, report.hashed, report.invalid_files,
                          "sqlalchemy" in sys.modules]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    indexed, skipped, hashed, invalid, imported = json.loads(done.stdout)
    assert (indexed, skipped, hashed) == (0, 3, 0)
    assert invalid == [list(pair) for pair in first.invalid_files]
    assert imported is False
    last_sync = rows(store, f"SELECT value FROM metadata WHERE key = '{pj.LAST_SYNC}'")
    assert last_sync and last_sync[0][0] != ""


def test_any_change_of_a_file_s_metadata_leaves_the_digest_path(store: StorePaths) -> None:
    record = write_record(store, "Touched", "Only its timestamp changes.")
    sync_store(store)
    path = store.records / f"{record.id}.md"
    settle(path)  # another mtime, same content
    report = sync_store(store)
    assert (report.hashed, report.indexed, report.skipped) == (1, 0, 1)
    path.rename(store.records / "renamed.md")
    report = sync_store(store)
    assert (report.hashed, report.indexed) == (1, 1)
    assert (sync_store(store).hashed, sync_store(store).indexed) == (0, 0)


def test_a_file_written_just_before_a_sync_is_hashed_again_next_time(store: StorePaths) -> None:
    write_record(store, "Fresh note", "Written a moment ago.", settled=False)
    assert sync_store(store).hashed == 1
    again = sync_store(store)
    assert again.hashed == 1 and again.indexed == 0 and again.skipped == 1


def test_a_same_size_edit_that_keeps_the_mtime_is_found_after_a_racy_sync(store: StorePaths) -> None:
    record = write_record(store, "Racy", "alpha words here", settled=False)
    path = store.records / f"{record.id}.md"
    sync_store(store)
    before = path.stat()
    path.write_text(path.read_text().replace("alpha", "gamma"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    report = sync_store(store)
    assert report.indexed == 1
    assert titles(store, "gamma") == ["Racy"] and titles(store, "alpha") == []


def test_edit_move_delete_and_invalid_files(store: StorePaths) -> None:
    kept = write_record(store, "Kept", "The deploy ritual needs two approvals.")
    moved = write_record(store, "Moved", "Portable source of truth lives in Markdown.")
    gone = write_record(store, "Gone", "Ephemeral note about caches.")
    sync_store(store)

    edited = store.records / f"{kept.id}.md"
    edited.write_text(edited.read_text().replace("two approvals", "three approvals"))
    settle(edited)
    (store.records / "archive").mkdir()
    os.rename(store.records / f"{moved.id}.md", store.records / "archive" / "moved.md")
    (store.records / f"{gone.id}.md").unlink()
    broken = store.records / "broken.md"
    broken.write_text("+++\nformat_version = 1\n+++\n\nno fields\n")
    settle(broken)
    before = broken.read_bytes()

    report = sync_store(store)
    assert (report.indexed, report.removed) == (2, 1)
    assert [name for name, _ in report.invalid_files] == ["broken.md"]
    assert "missing field" in report.invalid_files[0][1]
    assert broken.read_bytes() == before
    assert titles(store, "three approvals") == ["Kept"]
    assert titles(store, "ephemeral") == []
    assert rows(store, f"SELECT path FROM records WHERE id = '{moved.id}'") == [("records/archive/moved.md",)]
    again = sync_store(store)
    assert (again.indexed, again.hashed, again.invalid_files) == (0, 0, report.invalid_files)


def test_a_previously_indexed_file_that_becomes_invalid_loses_its_rows(store: StorePaths) -> None:
    record = write_record(store, "Soon broken", "Searchable marmalade text.")
    sync_store(store)
    path = store.records / f"{record.id}.md"
    path.write_text(path.read_text().replace('status = "active"', 'status = "deleted"'))
    report = sync_store(store)
    assert report.removed == 1 and len(report.invalid_files) == 1
    assert titles(store, "marmalade") == []


def test_foreign_scope_and_duplicate_ids_are_invalid(store: StorePaths) -> None:
    first = write_record(store, "Original", "Unique nebula words.", file_name="a.md")
    write_record(store, "Copy", "Unique nebula words again.", record_id=first.id, file_name="b.md")
    write_record(store, "Foreign", "Quasar text.", scope="project:other")
    report = sync_store(store)
    reasons = dict(report.invalid_files)
    assert reasons["b.md"] == "duplicate record id; first seen at a.md"
    assert "outside the selected store scope" in next(v for k, v in reasons.items() if k not in ("b.md",))
    assert titles(store, "nebula") == ["Original"] and titles(store, "quasar") == []


def test_deleted_corrupt_and_foreign_version_projections_are_rebuilt(store: StorePaths) -> None:
    write_record(store, "Durable", "Lighthouse keeper notes.")
    sync_store(store)
    store.index_path.unlink()
    assert sync_store(store).rebuilt and titles(store, "lighthouse") == ["Durable"]

    for suffix in ("-wal", "-shm"):
        Path(f"{store.index_path}{suffix}").unlink(missing_ok=True)
    store.index_path.write_bytes(b"this is not a database at all" * 100)
    assert sync_store(store).rebuilt and titles(store, "lighthouse") == ["Durable"]

    with sqlite3.connect(store.index_path) as conn:
        conn.execute(f"PRAGMA user_version = {pj.PROJECTION_VERSION + 1}")
    report = sync_store(store)
    assert report.rebuilt and report.indexed == 1
    assert rows(store, "PRAGMA user_version") == [(pj.PROJECTION_VERSION,)]


def test_readers_report_an_unusable_projection_without_a_traceback(store: StorePaths) -> None:
    write_record(store, "Durable", "Lighthouse keeper notes.")
    with pytest.raises(IndexUnavailable):
        search([store], "lighthouse", LEXICAL)
    store.index_path.mkdir()
    with pytest.raises(IndexUnavailable, match="could not be opened") as caught:
        sync_store(store)
    assert str(store.root) not in str(caught.value)


def test_writers_need_the_projection_lock(store: StorePaths) -> None:
    write_record(store, "Locked", "Busy writers wait for nobody.")
    sync_store(store)
    with exclusive_lock(store.projection_lock):
        with pytest.raises(IndexBusy):
            sync_store(store)
        with pytest.raises(IndexBusy):
            reindex_store(store)
        assert titles(store, "busy writers") == ["Locked"]


def test_another_process_holding_the_projection_lock_does_not_stop_readers(store: StorePaths) -> None:
    write_record(store, "Shared", "Readers never take the projection lock.")
    sync_store(store)
    with lock_held_elsewhere(store.projection_lock):
        with pytest.raises(IndexBusy):
            sync_store(store)
        assert titles(store, "projection lock") == ["Shared"]


def test_reindex_replaces_the_projection_and_never_changes_markdown(store: StorePaths) -> None:
    for n in range(4):
        write_record(store, f"Reindexed {n}", f"Stable body {n} about orchards.")
    sync_store(store)
    before = canonical_bytes(store)
    inode = store.index_path.stat().st_ino
    report = reindex_store(store)
    assert report.indexed == 4 and report.rebuilt
    assert store.index_path.stat().st_ino != inode
    assert sorted(titles(store, "orchards")) == [f"Reindexed {n}" for n in range(4)]
    assert canonical_bytes(store) == before
    assert not list(store.root.glob(".index.sqlite3.*"))


def test_reindex_failure_keeps_the_previous_projection(store: StorePaths) -> None:
    write_record(store, "Survivor", "The old index stays searchable.")
    sync_store(store)
    hidden = store.root / "records-hidden"
    store.records.rename(hidden)
    with pytest.raises(StoreError, match="records directory is missing"):
        reindex_store(store)
    hidden.rename(store.records)
    assert titles(store, "old index") == ["Survivor"]
    assert not list(store.root.glob(".index.sqlite3.*"))


def test_describe_reports_versions_without_creating_anything(tmp_path: Path) -> None:
    paths = make_store(tmp_path, View.GLOBAL)
    assert pj.describe(paths) == {"index_version": None, "embedding_version": None, "last_sync": None,
                                  "vectors_pending": 0}  # fmt: skip
    assert not paths.cache_dir.exists()
    write_record(paths, "Global", "Global memory body.")
    sync_store(paths)
    described = pj.describe(paths)
    assert described["index_version"] == pj.PROTOCOL_INDEX_VERSION and described["embedding_version"] is None
    assert described["last_sync"] is not None and described["last_sync"].endswith("Z")


def test_only_new_or_changed_chunks_are_embedded(store: StorePaths, embedder: Embedder) -> None:
    for n in range(3):
        write_record(store, f"Seed {n}", f"Seed record {n} about greenhouse irrigation schedules.")
    first = sync_store(store, embedder)
    assert first.embedded == first.chunks == 3 and first.vector_failure is None

    body = "# Plan\n\nWater the tomatoes at dawn.\n\n## Notes\n\n- check valves\n- log pressure\n"
    added = write_record(store, "Irrigation plan", body)
    expected = len(chunk_body(added.title, added.body, count_tokens=embedder.token_count))
    assert expected > 1
    report = sync_store(store, embedder)
    assert report.indexed == 1 and report.embedded == expected

    path = store.records / f"{added.id}.md"
    os.rename(path, store.records / "renamed.md")
    moved = sync_store(store, embedder)
    assert moved.indexed == 1 and moved.embedded == 0
    assert sync_store(store, embedder).embedded == 0
    assert rows(store, "SELECT count(*) FROM vectors") == [(3 + expected,)]


def test_reindex_carries_vectors_of_the_same_model(store: StorePaths, embedder: Embedder) -> None:
    write_record(store, "Carried", "Vectors survive a rebuild when nothing changed.")
    assert sync_store(store, embedder).embedded == 1
    report = reindex_store(store, embedder)
    assert report.embedded == 0 and report.vector_failure is None
    matrices = sorted(path.name for path in store.root.glob("index.sqlite3.*.npy"))
    assert len(matrices) == 2  # the vectors and rows files of the new projection only


LONG_BODY = (
    "The harbour pilots board every tanker at the outer buoy before dawn, and they stay on the bridge until the "
    "ship is moored. Tide tables for the estuary are printed each Monday and pinned beside the radio in the "
    "pilot station office for every crew. By the way, the new launch boat was delivered last Thursday and it "
    "already needs a replacement propeller for the winter."
)


def test_a_chunk_of_several_sentences_keeps_a_vector_per_sentence(store: StorePaths, embedder: Embedder) -> None:
    long = write_record(store, "Pilot station", LONG_BODY)
    write_record(store, "Short", "One sentence only.")
    assert sync_store(store, embedder).embedded == 2
    stored = dict(rows(store, "SELECT r.title, v.sentence_vectors FROM records AS r JOIN chunks AS c ON "
                              "c.record_id = r.id JOIN vectors AS v ON v.embed_hash = c.embed_hash"))  # fmt: skip
    assert stored["Short"] is None
    chunk = chunk_body(long.title, long.body, count_tokens=embedder.token_count)[0]
    offset = len(chunk.embed_text) - len(chunk.text)
    spans = [(offset + start, offset + end) for start, end in sentence_spans(chunk.text)]
    assert len(spans) == 3
    vectors = np.frombuffer(stored["Pilot station"], dtype="<f4").reshape(len(spans), embedder.dimension)
    np.testing.assert_allclose(vectors, embedder.embed_spans([chunk.embed_text], [spans])[1][0], atol=1e-5)

    assert reindex_store(store, embedder).embedded == 0  # carried with their chunk's vector
    carried = rows(store, "SELECT v.sentence_vectors FROM vectors AS v WHERE v.sentence_vectors IS NOT NULL")
    assert carried == [(stored["Pilot station"],)]


def test_the_vector_matrix_matches_the_stored_vectors_after_incremental_syncs(
    store: StorePaths, embedder: Embedder
) -> None:
    records = [write_record(store, f"Matrix {n}", f"Body number {n} about tide tables.") for n in range(4)]
    sync_store(store, embedder)
    (store.records / f"{records[0].id}.md").unlink()
    os.rename(store.records / f"{records[1].id}.md", store.records / "moved.md")
    write_record(store, "Matrix new", "A fresh body about harbour pilots.", status="archived")
    assert sync_store(store, embedder).embedded == 1
    assert rows(store, "SELECT count(*) FROM vectors") == rows(store, "SELECT count(DISTINCT embed_hash) FROM chunks")
    assert_matrix_matches_projection(store)


def test_a_new_copy_earlier_in_path_order_takes_the_id_from_an_indexed_file(store: StorePaths) -> None:
    original = write_record(store, "Original", "Unique pelican words.", file_name="m.md")
    sync_store(store)
    write_record(store, "Copy", "Unique pelican words, copied.", record_id=original.id, file_name="a.md")
    report = sync_store(store)
    assert report.invalid_files == [("m.md", "duplicate record id; first seen at a.md")]
    assert (report.indexed, report.removed) == (1, 0)
    assert titles(store, "pelican") == ["Copy"]
    write_record(store, "Later", "Unique pelican words, later.", record_id=original.id, file_name="z.md")
    again = sync_store(store)
    assert sorted(again.invalid_files) == [("m.md", "duplicate record id; first seen at a.md"),
                                           ("z.md", "duplicate record id; first seen at a.md")]  # fmt: skip
    assert titles(store, "pelican") == ["Copy"]
    (store.records / "a.md").unlink()
    assert sync_store(store).invalid_files == [("z.md", "duplicate record id; first seen at m.md")]
    assert titles(store, "pelican") == ["Original"]


def test_refreshing_vectors_after_a_sync_without_the_model_embeds_only_the_new_chunks(
    store: StorePaths, embedder: Embedder
) -> None:
    write_record(store, "Seed", "Seed record about greenhouse irrigation schedules.")
    sync_store(store, embedder)
    write_record(store, "Added", "A new body about harbour pilots.")
    lexical = sync_store(store)
    assert (lexical.indexed, lexical.embedded) == (1, 0)
    write_record(store, "Later", "Written after that sync, so not looked at by the refresh.")
    refreshed = refresh_vectors(store, embedder)
    assert (refreshed.indexed, refreshed.hashed, refreshed.embedded, refreshed.rebuilt) == (0, 0, 1, False)
    assert_matrix_matches_projection(store)
    assert sync_store(store, embedder).embedded == 1  # the next sync finds the later file


def test_refreshing_vectors_of_a_projection_deleted_since_the_sync_builds_it_again(
    store: StorePaths, embedder: Embedder
) -> None:
    write_record(store, "Only", "The only record, about kiln temperatures.")
    sync_store(store)
    store.index_path.unlink()
    report = refresh_vectors(store, embedder)
    assert (report.indexed, report.embedded, report.rebuilt) == (1, 1, True)
    assert_matrix_matches_projection(store)


def test_a_fresh_reindex_of_long_records_gives_every_chunk_its_vector(store: StorePaths, embedder: Embedder) -> None:
    topics = ["kiln firing", "tide tables", "harbour pilots", "orchard grafting", "glacier survey", "bell casting"]
    for number, topic in enumerate(topics):
        sentences = [f"Step {step} of the {topic} log notes reading {number * 97 + step} on gauge {step % 7}."
                     for step in range(90)]  # fmt: skip
        sections = [" ".join(sentences[start : start + 30]) for start in range(0, 90, 30)]
        write_record(store, f"Long {topic}", "\n\n".join(f"## Part {i}\n\n{text}" for i, text in enumerate(sections)))
    for number in range(40):
        write_record(store, f"Short {number}", f"A one-line note number {number} about the {topics[number % 6]}.")
    report = reindex_store(store, embedder)
    stored = rows(store, "SELECT c.embed_text, c.token_count, v.vector FROM chunks c "
                         "JOIN vectors v ON v.embed_hash = c.embed_hash ORDER BY c.id")  # fmt: skip
    assert report.vector_failure is None and report.embedded == len(stored) == report.chunks > 40 + 3 * len(topics)
    assert max(int(count) for _, count, _ in stored) > 200  # long chunks near the model's limit, beside short ones
    assert_matrix_matches_projection(store)
    texts = [str(text) for text, _, _ in stored]
    vectors = np.array([np.frombuffer(blob, dtype="<f4") for _, _, blob in stored])  # type: ignore[call-overload]
    alone = np.concatenate([embedder.embed([text]) for text in texts[::5]])
    assert np.abs(vectors[::5] - alone).max() < 1e-5  # the same vector as a text embedded on its own
    query = "steps of the bell casting log: gauge readings"
    hits = search([store], query, SearchOptions(mode="semantic"), embedder=embedder)
    assert hits[0].title == "Long bell casting"

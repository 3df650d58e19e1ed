"""The vector matrix grows by segments: a sync that adds chunks writes only their vectors; dead rows and
segments are bounded by laying the matrix out afresh. Real model, real SQLite, real files."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stormbuffer.core.stores import StorePaths
from stormbuffer.embedding import Embedder
from stormbuffer.index import projection as pj
from stormbuffer.index import vectors
from stormbuffer.index.sync import reindex_store, sync_store
from stormbuffer.retrieval import SearchOptions, search
from tests.matrices import assert_matrix_matches_projection, current_matrix
from tests.stores import make_store, write_record

TOPICS = ["tide tables", "harbour pilots", "greenhouse irrigation", "kiln temperatures", "beekeeping in winter",
          "bicycle gearing", "sourdough starters", "lighthouse lenses"]  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> StorePaths:
    return make_store(tmp_path)


def add(store: StorePaths, n: int, status: str = "active") -> str:
    topic = TOPICS[n % len(TOPICS)]
    return write_record(
        store, f"{topic.capitalize()} ({n})", f"Everything learned about {topic}, note {n}.", status=status
    ).id


def segment_files(store: StorePaths) -> dict[str, int]:
    """Segment file name → inode, for the current layout."""
    layout = current_matrix(store).layout
    return {path.name: path.stat().st_ino for path in layout.segment_paths(store.index_path)}


def test_adding_a_record_writes_only_its_vectors_as_a_new_segment(store: StorePaths, embedder: Embedder) -> None:
    for n in range(4):
        add(store, n)
    sync_store(store, embedder)
    before = segment_files(store)
    assert len(before) == 1

    add(store, 4)
    assert sync_store(store, embedder).embedded == 1
    after = segment_files(store)
    assert len(after) == 2 and {name: after[name] for name in before} == before  # the first file is untouched
    matrix = assert_matrix_matches_projection(store)
    assert [segment.shape[0] for segment in matrix.segments] == [4, 1]
    assert sorted(path.name for path in store.root.glob("index.sqlite3.*.npy")) == sorted(
        path.name for path in matrix.layout.paths(store.index_path)
    )  # the previous rows file is gone, both segments stay


def test_a_removed_record_leaves_dead_rows_that_no_search_returns(store: StorePaths, embedder: Embedder) -> None:
    ids = [add(store, n) for n in range(8)]
    sync_store(store, embedder)
    (store.records / f"{ids[2]}.md").unlink()  # greenhouse irrigation
    sync_store(store, embedder)
    matrix = assert_matrix_matches_projection(store)
    assert len(matrix.segments) == 1 and matrix.dead == 1
    options = SearchOptions(mode="semantic", limit=8)
    assert ids[2] not in [
        hit.record_id for hit in search([store], "watering plants in a greenhouse", options, embedder=embedder)
    ]
    assert len(search([store], "watering plants in a greenhouse", options, embedder=embedder)) == 7


def test_a_segmented_matrix_ranks_exactly_like_one_laid_out_afresh(store: StorePaths, embedder: Embedder) -> None:
    ids = [add(store, n) for n in range(8)]
    sync_store(store, embedder)
    (store.records / f"{ids[0]}.md").unlink()
    add(store, 8)
    add(store, 9, status="archived")
    sync_store(store, embedder)
    write_record(store, "Note 1 on harbour pilots", "Pilots board ships at the harbour mouth.", record_id=ids[1])
    sync_store(store, embedder)  # an edited record: new chunk ids, its old rows dead
    assert len(assert_matrix_matches_projection(store).segments) == 3

    queries = ["harbour pilots boarding ships", "winter bees", "bread", "lenses of a lighthouse"]
    modes = [SearchOptions(mode=mode, limit=5, include_inactive=inactive)
             for mode in ("semantic", "hybrid") for inactive in (False, True)]  # fmt: skip
    segmented = [search([store], query, options, embedder=embedder) for query in queries for options in modes]
    reindex_store(store, embedder)
    assert len(current_matrix(store).segments) == 1
    fresh = [search([store], query, options, embedder=embedder) for query in queries for options in modes]
    assert [[hit.record_id for hit in hits] for hits in segmented] == [
        [hit.record_id for hit in hits] for hits in fresh
    ]
    assert [[hit.score for hit in hits] for hits in segmented] == [
        pytest.approx([hit.score for hit in hits], rel=1e-6) for hits in fresh
    ]
    assert all(len(hits) == 5 for hits in segmented)


def test_dead_rows_past_a_quarter_lay_the_matrix_out_afresh(store: StorePaths, embedder: Embedder) -> None:
    ids = [add(store, n) for n in range(8)]
    sync_store(store, embedder)
    (store.records / f"{ids[0]}.md").unlink()
    (store.records / f"{ids[1]}.md").unlink()
    sync_store(store, embedder)
    assert current_matrix(store).dead == 2  # a quarter: kept
    old_segment = set(segment_files(store))
    (store.records / f"{ids[2]}.md").unlink()
    sync_store(store, embedder)
    matrix = assert_matrix_matches_projection(store)
    assert (matrix.dead, len(matrix.segments)) == (0, 1) and set(segment_files(store)) != old_segment
    assert not (store.index_path.parent / next(iter(old_segment))).exists()


def test_segments_past_the_limit_lay_the_matrix_out_afresh(store: StorePaths, embedder: Embedder) -> None:
    add(store, 0)
    sync_store(store, embedder)
    counts = []
    for n in range(1, vectors.MAX_SEGMENTS + 1):
        add(store, n)
        sync_store(store, embedder)
        counts.append(len(assert_matrix_matches_projection(store).segments))
    assert counts == [*range(2, vectors.MAX_SEGMENTS + 1), 1]
    assert len(list(store.root.glob("index.sqlite3.*.npy"))) == 2


def test_a_projection_that_names_one_matrix_file_without_a_segment_list_is_read(
    store: StorePaths, embedder: Embedder
) -> None:
    ids = [add(store, n) for n in range(3)]
    sync_store(store, embedder)
    with sqlite3.connect(store.index_path) as conn:
        layout = vectors.Layout.parse(pj.get_settings(conn)[pj.VECTOR_FILES])
        single = json.dumps({"token": layout.token, "scopes": list(layout.scopes)})
        conn.execute("UPDATE metadata SET value = ? WHERE key = ?", (single, pj.VECTOR_FILES))
    assert vectors.Layout.parse(single) == layout
    hits = search(
        [store], "pilots guiding ships into a harbour", SearchOptions(mode="semantic", limit=1), embedder=embedder
    )
    assert [hit.record_id for hit in hits] == [ids[1]]
    add(store, 3)
    assert sync_store(store, embedder).embedded == 1
    assert len(assert_matrix_matches_projection(store).segments) == 2


@given(
    sizes=st.lists(st.integers(0, 6), min_size=1, max_size=4),
    picks=st.lists(st.booleans(), max_size=24),
)
def test_similarity_over_segments_equals_the_product_of_the_whole_matrix(sizes: list[int], picks: list[bool]) -> None:
    rng = np.random.default_rng(sum(sizes) * 31 + len(picks))
    segments = tuple(rng.standard_normal((size, 3)).astype(np.float32) for size in sizes)
    whole = np.concatenate(segments)
    rows = np.zeros(whole.shape[0], dtype=vectors.ROW_DTYPE)
    matrix = vectors.Matrix(vectors.Layout("t", ("project",), tuple(map(str, range(len(sizes))))), segments, rows)
    query = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    positions = np.flatnonzero(np.resize(np.array(picks or [True]), whole.shape[0]))
    assert np.allclose(matrix.similarity(query), whole @ query)
    assert np.allclose(matrix.similarity(query, positions), whole[positions] @ query)
    assert np.array_equal(matrix.vectors(positions), whole[positions])


def test_every_matrix_file_of_the_previous_layout_but_the_kept_segments_is_removed(
    store: StorePaths, embedder: Embedder
) -> None:
    add(store, 0)
    sync_store(store, embedder)
    first = current_matrix(store).layout
    add(store, 1)
    sync_store(store, embedder)
    second = current_matrix(store).layout
    assert not first.rows_path(store.index_path).exists()
    assert all(path.exists() for path in second.paths(store.index_path))
    assert os.path.exists(first.segment_paths(store.index_path)[0])


def test_matrices_written_a_few_vectors_at_a_time_match_the_projection(
    store: StorePaths, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fresh, appended and relaid matrices are copied in blocks smaller than the store; each block
    lands on its own chunk's row (the merge of kept and new vectors included)."""
    from stormbuffer.index import sync

    monkeypatch.setattr(sync, "MATRIX_BLOCK_ROWS", 3)
    ids = [add(store, n) for n in range(8)]
    sync_store(store, embedder)  # fresh: 8 rows in blocks of 3
    assert len(assert_matrix_matches_projection(store).segments) == 1
    for n in range(8, 13):
        add(store, n)
    sync_store(store, embedder)  # appended: a segment of 5
    assert [segment.shape[0] for segment in assert_matrix_matches_projection(store).segments] == [8, 5]
    for record_id in ids[:4]:
        (store.records / f"{record_id}.md").unlink()
    add(store, 13)
    sync_store(store, embedder)  # relaid: kept vectors and one new one, merged block by block
    matrix = assert_matrix_matches_projection(store)
    assert (matrix.dead, len(matrix.segments), matrix.size) == (0, 1, 10)


def test_a_segment_missing_vectors_is_never_written(tmp_path: Path) -> None:
    layout = vectors.Layout("t1", ("s",), ("t1",))
    index = tmp_path / "index.sqlite3"
    rows = np.zeros(3, dtype=vectors.ROW_DTYPE)
    blocks = [np.ones((2, 4), dtype=np.float32)]
    with pytest.raises(ValueError):
        vectors.write(index, layout, rows, vectors.Segment(3, 4, blocks))
    assert list(tmp_path.iterdir()) == []


def test_a_long_running_process_drops_a_mapped_matrix_whose_files_were_removed(
    store: StorePaths, embedder: Embedder
) -> None:
    for n in range(4):
        add(store, n)
    sync_store(store, embedder)
    first = current_matrix(store).layout
    add(store, 4)
    sync_store(store, embedder)  # a new rows file; the first one is removed
    assert not first.rows_path(store.index_path).exists()
    current_matrix(store)
    assert first.rows_path(store.index_path) not in vectors._cache
    assert current_matrix(store).layout.rows_path(store.index_path) in vectors._cache

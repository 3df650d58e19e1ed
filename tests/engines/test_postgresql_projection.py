"""The PostgreSQL projection ranks exactly as the SQLite one: the same records, loaded into both, give
the same hits in the same order in lexical, semantic and hybrid modes, on a real server and the real model."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from stormbuffer.core.codec import parse_markdown
from stormbuffer.core.records import Record
from stormbuffer.core.stores import StorePaths, record_scope
from stormbuffer.embedding import Embedder
from stormbuffer.engines import projection as engine_projection
from stormbuffer.engines.postgresql import projection as pg
from stormbuffer.engines.postgresql import statements, tables
from stormbuffer.engines.postgresql.projecting import (
    ensure_vector_index,
    fill_vectors,
    project,
    refresh_statistics,
    unproject,
)
from stormbuffer.index import postings
from stormbuffer.index import projection as pj
from stormbuffer.index.sync import sync_store
from stormbuffer.retrieval.hits import SearchOptions
from stormbuffer.retrieval.search import Ranking, effective_options, rank_projections
from tests.stores import make_store, write_record

TOPICS = [
    "Deploys need a green build: run the whole suite before tagging a release.",
    "The staging database is restored from last night's snapshot every morning at six.",
    "Kubernetes pods restart when the readiness probe fails three times in a row.",
    "We decided to keep the public API versioned in the URL path rather than in a header.",
    "The espresso machine on the third floor needs descaling every second Friday.",
    "Release notes are written by the engineer who merged the last change of the sprint.",
    "Portable builds use a pinned toolchain so that binaries match across laptops and CI.",
    "Secrets never go into the repository; the vault issues short-lived tokens instead.",
    "The search index is rebuilt from the Markdown records whenever its layout changes.",
    "On-call engineers hand over at nine with a short written checkpoint of open incidents.",
    "Database migrations run before the new application version starts serving traffic.",
    "The design review meets on Tuesdays; proposals are shared a day ahead in the channel.",
    "Backups are tested monthly by restoring one into a scratch environment and querying it.",
    "Flaky tests are quarantined within a day and fixed or deleted within a week.",
    "The monorepo uses code owners so that every change is reviewed by the owning team.",
    "Latency budgets: recall must answer within twenty milliseconds at ten thousand records.",
]
QUERIES = [
    "deploy release build", "how do we restore the staging database", "pods restarting after probe failures",
    "api versioning decision", "coffee machine cleaning", "who writes release notes", "portab toolchain",
    "where do secrets live", "rebuild the index", "on-call handover", "migrations before serving traffic",
    "tests that fail sometimes", "review", "latency at ten thousand records", "the", "kubernetes",
]  # fmt: skip
KINDS = ("fact", "decision", "procedure", "checkpoint")


@dataclass
class Loaded:
    paths: StorePaths
    engine: Engine
    embedder: Embedder


def corpus(paths: StorePaths) -> None:
    """48 records of one to three sections, of every kind, a few archived (filtered out by default)."""
    chosen = random.Random(7)
    for number in range(48):
        sections = [chosen.choice(TOPICS) + " " + chosen.choice(TOPICS) for _ in range(1 + number % 3)]
        body = "\n\n".join(f"## Part {part}\n\n{section}" for part, section in enumerate(sections, 1))
        title = f"Note {number:03d} on record keeping: {chosen.choice(TOPICS)[:30].strip()}"
        write_record(paths, title, body, kind=KINDS[number % 4], status="archived" if number % 11 == 5 else "active",
                     aliases=(f"note-{number}",))  # fmt: skip


def stored_records(paths: StorePaths) -> list[tuple[str, Record]]:
    """(store-relative path, record) in the order the SQLite projection holds their chunks."""
    index = pj.existing_index_path(paths)
    assert index is not None
    with pj.reading(index) as conn:
        order = conn.execute("SELECT r.path FROM chunks AS c JOIN records AS r ON r.id = c.record_id "
                             "GROUP BY r.path ORDER BY min(c.id)").fetchall()  # fmt: skip
    return [(path, parse_markdown((paths.root / path).read_bytes())) for (path,) in order]


@pytest.fixture
def loaded(tmp_path: Path, embedder: Embedder, postgres_url: str) -> Iterator[Loaded]:
    paths = make_store(tmp_path)
    corpus(paths)
    sync_store(paths, embedder)
    engine = create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        tables.create(conn, embedder.dimension)
        project(conn, record_scope(paths), stored_records(paths), dimension=embedder.dimension,
                count_tokens=embedder.token_count, embedder=embedder)  # fmt: skip
    yield Loaded(paths, engine, embedder)
    engine.dispose()


def both(loaded: Loaded, query: str, options: SearchOptions) -> tuple[Ranking, Ranking]:
    """The ranking of `query` from the SQLite projection and from the PostgreSQL one."""
    options = effective_options([loaded.paths], options)
    in_sqlite = partial(engine_projection.reading, loaded.paths)
    in_postgres = partial(pg.reading, loaded.engine, record_scope(loaded.paths), loaded.paths.root)
    return (rank_projections([in_sqlite], query, options, embedder=loaded.embedder),
            rank_projections([in_postgres], query, options, embedder=loaded.embedder))  # fmt: skip


def assert_same(sqlite: Ranking, postgres: Ranking) -> None:
    assert postgres.mode == sqlite.mode
    assert postgres.semantic_fallback == sqlite.semantic_fallback
    assert [(hit.record_id, hit.ordinal) for hit in postgres.hits] == [
        (hit.record_id, hit.ordinal) for hit in sqlite.hits
    ]
    for ours, theirs in zip(postgres.hits, sqlite.hits, strict=True):
        assert ours.bm25 == theirs.bm25  # the same postings and statistics: the same floats
        assert ours.score == pytest.approx(theirs.score, abs=1e-5)  # float32 products in NumPy, doubles in pgvector
        assert (ours.title, ours.path, ours.match_reasons[0].split("=")[0]) == (
            theirs.title, theirs.path, theirs.match_reasons[0].split("=")[0])  # fmt: skip


def test_vectors_are_kept_inline_and_a_bulk_load_refreshes_the_planner_statistics(loaded: Loaded) -> None:
    chunks = "stormbuffer.projection_chunks"
    storage = text(
        f"SELECT attstorage FROM pg_attribute WHERE attrelid = '{chunks}'::regclass AND attname = 'embedding'"
    )
    estimate = text(f"SELECT reltuples FROM pg_class WHERE oid = '{chunks}'::regclass")
    dimension = loaded.embedder.dimension
    with loaded.engine.begin() as conn:
        assert conn.execute(storage).scalar() == "p"
        conn.execute(text(f"ALTER TABLE {chunks} ALTER COLUMN embedding SET STORAGE EXTENDED"))
        tables.create(conn, dimension)  # a database made before vectors were kept inline
        assert conn.execute(storage).scalar() == "p"
        refresh_statistics(conn, dimension)
        assert conn.execute(estimate).scalar() == conn.execute(text(f"SELECT count(*) FROM {chunks}")).scalar() > 0


@pytest.mark.parametrize("mode", ["lexical", "semantic", "hybrid"])
def test_the_same_records_rank_the_same_in_both_projections(loaded: Loaded, mode: str) -> None:
    for query in QUERIES:
        sqlite, postgres = both(loaded, query, SearchOptions(limit=10, mode=mode))
        assert sqlite.hits, query
        assert sqlite.mode == mode
        assert_same(sqlite, postgres)


def test_filters_and_removed_records_rank_the_same(loaded: Loaded) -> None:
    options = SearchOptions(limit=20, mode="hybrid", kinds=("decision", "procedure"))
    sqlite, postgres = both(loaded, "release database", options)
    assert {hit.kind for hit in sqlite.hits} <= {"decision", "procedure"}
    assert_same(sqlite, postgres)
    gone = [hit.record_id for hit in sqlite.hits[:3]]
    for record_id in gone:
        (loaded.paths.records / f"{record_id}.md").unlink()
    sync_store(loaded.paths, loaded.embedder)
    with loaded.engine.begin() as conn:
        unproject(conn, record_scope(loaded.paths), gone, dimension=loaded.embedder.dimension)
    for mode in ("lexical", "hybrid"):
        sqlite, postgres = both(loaded, "release database", SearchOptions(limit=20, mode=mode))
        assert not {hit.record_id for hit in sqlite.hits} & set(gone)
        assert_same(sqlite, postgres)
    with loaded.engine.connect() as conn:
        counted = conn.execute(text("SELECT count(*), sum(length) FROM stormbuffer.projection_chunks")).one()
        kept = conn.execute(text("SELECT chunks, terms FROM stormbuffer.projection_stats")).one()
        assert tuple(kept) == tuple(counted)


@contextmanager
def through_the_index(loaded: Loaded) -> Iterator[pg.PostgresProjection]:
    """A reading whose planner may not scan the (small) table: vector queries go through the HNSW index."""
    scope = record_scope(loaded.paths)
    with pg.reading(loaded.engine, scope, loaded.paths.root) as projection:
        assert projection.indexed
        projection.set_local("SET LOCAL enable_seqscan = off")
        yield projection


def test_past_its_threshold_the_hnsw_index_answers_as_exact_search_does(loaded: Loaded) -> None:
    with loaded.engine.begin() as conn:
        assert not ensure_vector_index(conn)  # 48 records are far below the threshold: exact search
        assert ensure_vector_index(conn, at_least=1)
    with through_the_index(loaded) as projection:
        plan = projection.rows(text("EXPLAIN SELECT id FROM stormbuffer.projection_chunks "
                                    "ORDER BY embedding <=> (SELECT embedding FROM stormbuffer.projection_chunks "
                                    "LIMIT 1) LIMIT 10"))  # fmt: skip
        assert "Index Scan using projection_chunks_embedding_hnsw" in " ".join(line for (line,) in plan)
    options = effective_options([loaded.paths], SearchOptions(limit=10, mode="semantic"))
    exact = partial(pg.reading, loaded.engine, record_scope(loaded.paths), loaded.paths.root, exact=True)
    for query in QUERIES:
        indexed = rank_projections([partial(through_the_index, loaded)], query, options, embedder=loaded.embedder)
        scanned = rank_projections([exact], query, options, embedder=loaded.embedder)
        assert [hit.record_id for hit in indexed.hits] == [hit.record_id for hit in scanned.hits]


def plan_of(projection: pg.PostgresProjection, sql: str, values: dict[str, Any]) -> str:
    """The plan of one of the reader's statements with these values, in this reading."""
    return " ".join(line for (line,) in projection.query(f"EXPLAIN {sql}", values))


def test_postings_are_read_from_their_covering_key_and_an_older_key_is_rebuilt(loaded: Loaded) -> None:
    postings = "stormbuffer.projection_postings"
    covered = text(f"SELECT indnatts > indnkeyatts FROM pg_index WHERE indrelid = '{postings}'::regclass "
                   "AND indisprimary")  # fmt: skip
    dimension = loaded.embedder.dimension
    with loaded.engine.begin() as conn:
        assert conn.execute(covered).scalar() is True
        conn.execute(text(f"ALTER TABLE {postings} DROP CONSTRAINT projection_postings_pkey, "
                          "ADD CONSTRAINT projection_postings_pkey PRIMARY KEY (store, term, chunk)"))  # fmt: skip
        assert conn.execute(covered).scalar() is False  # a database made before the key covered the counts
        tables.create(conn, dimension)
        assert conn.execute(covered).scalar() is True
    with loaded.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"VACUUM {postings}"))  # marks pages all-visible, as autovacuum does after a load
    scope = record_scope(loaded.paths)
    with pg.reading(loaded.engine, scope, loaded.paths.root) as projection:
        projection.rows(text("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off"))  # a small table
        values = {"store": scope, "terms": ["releas"], "lows": [], "highs": [], "total": 1000, "packed": ["releas"]}
        assert "Index Only Scan using projection_postings_pkey" in plan_of(projection, statements.OWN, values)
    sqlite, postgres = both(loaded, "deploy release build", SearchOptions(limit=10, mode="lexical"))
    assert sqlite.hits
    assert_same(sqlite, postgres)


def test_chunks_waiting_for_a_vector_are_counted_from_their_own_index(loaded: Loaded) -> None:
    scope = record_scope(loaded.paths)
    dimension = loaded.embedder.dimension
    record = write_record(loaded.paths, "Waiting", "## One\n\nNot embedded yet.\n\n## Two\n\nNor this one.")
    with loaded.engine.begin() as conn:
        written = project(conn, scope, [(f"records/{record.id}.md", record)], dimension=dimension,
                          count_tokens=loaded.embedder.token_count)  # fmt: skip
    assert written >= 2
    with pg.reading(loaded.engine, scope, loaded.paths.root) as projection:
        assert projection.settings[pj.VECTOR_PENDING] == str(written)
        projection.rows(text("SET LOCAL enable_seqscan = off"))
        values = {"store": scope, "random_page_cost": "1.1"}
        assert "projection_chunks_waiting" in plan_of(projection, statements.OPENING, values)
    with loaded.engine.begin() as conn:
        assert fill_vectors(conn, scope, loaded.embedder, dimension=dimension) == (written, 0)
    with pg.reading(loaded.engine, scope, loaded.paths.root) as projection:
        assert projection.settings[pj.VECTOR_PENDING] == "0"


def test_similarities_and_sentences_agree_whether_read_with_the_rows_or_asked_for(loaded: Loaded) -> None:
    scope = record_scope(loaded.paths)
    dimension = loaded.embedder.dimension
    query = loaded.embedder.embed(["restoring the staging database"])[0]
    options = effective_options([loaded.paths], SearchOptions(limit=10))
    record = write_record(loaded.paths, "Restores", " ".join(TOPICS[:4]))  # fmt: skip
    with loaded.engine.begin() as conn:  # a chunk of several sentences: it has sentence vectors
        project(conn, scope, [(f"records/{record.id}.md", record)], dimension=dimension,
                count_tokens=loaded.embedder.token_count, embedder=loaded.embedder)  # fmt: skip
    reading = partial(pg.reading, loaded.engine, scope, loaded.paths.root)
    with reading() as projection:  # nothing read yet: each answer comes from a statement
        search = projection.vector_search(loaded.embedder)
        assert search is not None
        chunks = sorted(int(chunk) for (chunk,) in projection.rows(text(
            "SELECT c.id FROM stormbuffer.projection_chunks AS c JOIN stormbuffer.projection_records AS r "
            "ON r.store = c.store AND r.id = c.record_id WHERE r.status = 'active' "
            "ORDER BY c.sentence_vectors IS NULL, c.id LIMIT 12")))  # those with sentences first  # fmt: skip
        asked, asked_blobs = search.similarities(query, chunks), projection.sentence_blobs(chunks)
    with reading() as projection:  # the rows read first: the answers come with them
        search = projection.vector_search(loaded.embedder)
        assert search is not None
        assert {row[0] for row in projection.chunk_rows(chunks, options)} == set(chunks)
        assert projection.vectors.keys() == set(chunks)
        read, read_blobs = search.similarities(query, chunks), projection.sentence_blobs(chunks)
    assert asked[0] == read[0] == chunks
    assert asked[1] == read[1]
    assert asked_blobs == read_blobs and asked_blobs


def test_the_vector_search_runs_on_a_second_connection_in_the_readings_snapshot(loaded: Loaded) -> None:
    scope = record_scope(loaded.paths)
    options = effective_options([loaded.paths], SearchOptions(limit=10, mode="semantic"))
    vector = loaded.embedder.embed(["how do we restore the staging database"])[0]
    with pg.reading(loaded.engine, scope, loaded.paths.root) as projection:
        search = projection.vector_search(loaded.embedder)
        assert search is not None and projection.beside is not None and projection.beside.opened is None
        with loaded.engine.begin() as conn:  # another writer removes every record after the snapshot began
            conn.execute(text("DELETE FROM stormbuffer.projection_records WHERE store = :store"), {"store": scope})
        found = search.nearest(vector, options, 10)  # the second connection opens with it, after the removal
        assert len(found.chunks) == 10  # and still reads the snapshot
        [(ours,)] = projection.rows(text("SELECT pg_backend_pid()"))
        [(beside,)] = projection.beside.rows("SELECT pg_backend_pid()")
        assert beside != ours
    with pg.reading(loaded.engine, scope, loaded.paths.root) as projection:
        search = projection.vector_search(loaded.embedder)
        assert search is not None and search.nearest(vector, options, 10).chunks == []


def test_the_vector_search_reads_further_until_enough_records_pass_its_filters(loaded: Loaded) -> None:
    scope = record_scope(loaded.paths)
    vector = loaded.embedder.embed(["how do we restore the staging database"])[0]
    checkpoints = effective_options([loaded.paths], SearchOptions(limit=10, mode="semantic", kinds=("checkpoint",)))
    nothing = effective_options([loaded.paths], SearchOptions(limit=10, mode="semantic", kinds=("none",)))
    with pg.reading(loaded.engine, scope, loaded.paths.root) as projection:
        search = projection.vector_search(loaded.embedder)
        assert search is not None and projection.beside is not None
        every = search.nearest(vector, checkpoints, 50)  # 200 chunks: all; the 11 active checkpoints
        assert len(every.chunks) == 11 and {row[5] for row in projection.nearest_rows[1].values()} == {"checkpoint"}
        sent: list[int] = []
        rows = projection.beside.rows

        def counted(sql: str, values: Any = None, *, settings: str = "") -> list[Any]:
            sent.append(values["take"])
            return rows(sql, values, settings=settings)

        projection.beside.rows = counted  # type: ignore[method-assign]
        few = search.nearest(vector, checkpoints, 5)  # the 20 nearest chunks hold fewer than 5 checkpoints
        assert sent == [20, 80]
        assert few.chunks == every.chunks[:5] and few.similarities == every.similarities[:5]
        sent.clear()
        assert search.nearest(vector, nothing, 5).chunks == []  # none passes: read until every chunk was
        assert sent[:2] == [20, 80] and len(sent) >= 3


def test_a_read_opens_without_a_ping_and_retries_once_when_the_server_dropped_its_connection(loaded: Loaded) -> None:
    query, options = "where do secrets live", SearchOptions(limit=10, mode="hybrid")
    _sqlite, before = both(loaded, query, options)  # the reads' connections are now pooled
    with loaded.engine.connect() as conn:
        dropped = conn.execute(text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                                    "datname = current_database() AND pid <> pg_backend_pid()")).scalar()  # fmt: skip
    assert dropped
    sqlite, after = both(loaded, query, options)
    assert_same(sqlite, after)
    assert [hit.chunk for hit in after.hits] == [hit.chunk for hit in before.hits]


def test_a_term_in_half_the_chunks_is_not_read_when_a_rarer_one_matches_and_ranks_the_same(loaded: Loaded) -> None:
    scope = record_scope(loaded.paths)
    with pg.reading(loaded.engine, scope, loaded.paths.root) as projection:
        chunks = postings.Stats.of(projection.settings).chunks
        terms = projection.terms
        note, kubernetes = terms.own(["note", "kubernet"])  # every title says "Note", a few chunks "Kubernetes"
        assert note == chunks and isinstance(kubernetes, bytes)  # only the count of the common term
        assert 0 < 2 * len(kubernetes) // 8 < chunks
        note, prefix = terms.own(["note", "kubern"])  # a prefix of rare terms proves a rarer match too
        assert note == chunks and prefix is None
        both_common = terms.own(["note", "record"])  # nothing rarer: both are read
        assert all(isinstance(entries, bytes) and len(entries) // 8 * 2 >= chunks for entries in both_common)
        assert isinstance(terms.own(["note", "nosuchterm"])[0], bytes)  # a term of no chunk is not rarer
    for query in ("note kubernetes", "note kubern", "note record", "notes about pods", "note nosuchterm"):
        for mode in ("lexical", "hybrid"):
            sqlite, postgres = both(loaded, query, SearchOptions(limit=10, mode=mode))
            assert sqlite.hits, query
            assert_same(sqlite, postgres)


def test_a_long_querys_postings_are_packed_on_both_connections_and_rank_the_same(
    loaded: Loaded, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope = record_scope(loaded.paths)
    terms = ["note", "kubernet", "deploy", "releas", "build", "kubern"]
    with pg.reading(loaded.engine, scope, loaded.paths.root) as projection:
        alone = projection.terms.own(terms)  # a small store: one connection packs them all
        assert projection.beside is not None and projection.beside.opened is None
    monkeypatch.setattr(pg, "SHARED_FROM_CHUNKS", 1)
    with pg.reading(loaded.engine, scope, loaded.paths.root) as projection:
        assert projection.beside is not None and projection.beside.opened is None
        shared = projection.terms.own(terms)
        assert projection.beside.opened is not None  # the vector search's connection packed its share
    monkeypatch.setattr(pg, "SHARED_FROM", len(terms) + 1)
    with pg.reading(loaded.engine, scope, loaded.paths.root) as projection:
        assert projection.terms.own(terms) == alone
        assert projection.beside is not None and projection.beside.opened is None
    assert shared == alone
    assert sum(isinstance(entries, bytes) and len(entries) > 0 for entries in shared) >= 3
    monkeypatch.undo()
    for mode in ("lexical", "hybrid"):
        sqlite, postgres = both(
            loaded, "notes on kubernetes deploys, releases and builds", SearchOptions(limit=10, mode=mode)
        )
        assert sqlite.hits
        assert_same(sqlite, postgres)


def test_reads_end_with_a_commit_and_keep_their_prepared_statements(loaded: Loaded) -> None:
    scope = record_scope(loaded.paths)
    url = loaded.engine.url.render_as_string(hide_password=False)
    engine = create_engine(url, pool_size=2, max_overflow=0)  # each connection opens every other read
    reading = partial(pg.reading, engine, scope, loaded.paths.root)
    options = effective_options([loaded.paths], SearchOptions(limit=10, mode="hybrid"))
    try:
        for query in QUERIES:  # psycopg prepares a statement on its fifth run on a connection
            assert rank_projections([reading], query, options, embedder=loaded.embedder).hits
        with reading() as projection:
            prepared = [sql for (sql,) in projection.rows(text("SELECT statement FROM pg_prepared_statements"))]
    finally:
        engine.dispose()
    assert any("pg_export_snapshot()" in sql for sql in prepared), prepared  # the opening, ready-parsed
    assert any("projection_terms" in sql for sql in prepared), prepared  # the postings statement

"""A PostgreSQL store at scale: load `--records` records in bulk, then recall, HNSW recall@10 and warm writes.

Starts a real PostgreSQL with pgvector (the test server of `tests/postgres.py`), makes a project store
on it (`initialize_store(…, engine="postgresql")`) and loads records 0..N-1 of the benchmark corpus
(bench/corpus.py) in bulk: each record's canonical Markdown row (`stormbuffer.records`, as a write
stores it) and its projection rows, built by the engine's own code (`index.sync.record_chunks` for the
chunks, `index.postings.weighted_terms` for the BM25 postings, `index.sync._chunk_vectors` for the
vectors and sentence vectors, the statistics row, each term's chunk count (counted from the postings)
and the vector model setting), streamed with COPY
into tables whose indexes and constraints are dropped for the load and rebuilt from their own
definitions afterwards (then VACUUM ANALYZE, as autovacuum would; then the HNSW index through
`projecting.ensure_vector_index`, in memory: `maintenance_work_mem` raised for that session, one
maintenance worker at most). A sample of records is then projected again by `projecting.project`
in a rolled-back transaction, and its rows must equal the bulk-loaded ones.

Vectors (labelled so in the output): the real model embeds `--sample` corpus texts; every chunk and
sentence gets a unit mix of three of those real vectors chosen and weighted by a hash of its text
(`WeightedMixes`: distinct texts, distinct vectors). Queries are embedded by the real model.
With `--short`, the records are instead the first N short records of real sentences of
bench/short_records.py (one chunk each, no sentence vectors), each chunk with the real model's own
vector precomputed there (beyond its first 300,000 records, derived vectors: unit sums of two real
ones, labelled so in the output), and the queries are held-out real ones (LongMemEval-S questions, SciFact
test claims); saved as bench/results/pg_scale-short-N.json.

Then, in this process (a long-running one, as the daemon and the MCP server are: one `Session` with
a warm model and a freshness registry):
- hybrid recall (`protocol.reads.search`, limit 10) of `--queries` queries, a warm round and a timed
  round: p50/p95, and the query embedding's own p50 beside it;
- HNSW recall@10 against exact: the 10 nearest records' chunks through the normal reader (the HNSW
  index past `HNSW_FROM` vectors) and through the `exact=True` reader, for each query; p50 of each;
- warm `memory_remember` (`protocol.writes.remember`, then `Session.written` as `sbuf invoke` and the
  MCP server do), `--writes` times: p50/p95;
- build times (records, chunks, vectors, postings, statistics, HNSW index), database and table sizes.
`sbuf --version` is timed in the same run. Progress goes to stderr (a line per batch and every
`HEARTBEAT` seconds during index builds). Saves bench/results/pg_scale-N.json.

`--keep DIR` keeps the server and the store in a new folder DIR; `--reuse DIR` measures them again
without loading (`--writes 0` leaves the kept database as it is); `--hnsw M/EF_CONSTRUCTION` builds
the HNSW index with other settings than the engine's (dropping one built otherwise), and
`--ef-sweep 100,200,400` adds HNSW recall@10 with those least ef_search values.

Usage: python bench/pg_scale.py [--records 10000] [--queries 200] [--writes 100] [--sample 256]
       [--batch 2000] [--hnsw-memory 4GB] [--shared-buffers 1GB] [--short [--data ../shared/bench]]
       [--keep DIR | --reuse DIR] [--hnsw 16/64] [--ef-sweep 100,200,400]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
from corpus import make_record  # noqa: E402
from hnsw_recall import query_texts, version_seconds  # noqa: E402
from machine import save  # noqa: E402
from real_vectors import CACHE  # noqa: E402
from real_vectors import query_texts as held_out  # noqa: E402
from scale import ReusedVectors  # noqa: E402
from shared_data import DEFAULT, require  # noqa: E402

from stormbuffer.engines.postgresql.tables import TERM_COUNTS, TERMS_TABLE  # noqa: E402
from tests.postgres import PostgresServer  # noqa: E402

RESULTS = ROOT / "bench" / "results"
HEARTBEAT = 10.0  # seconds between sign-of-life lines during a long statement
MIN_FREE_GB = 12  # the load stops (and says so) when the disk holding the database has less free than this
CHECKED = 25  # records projected again by `projecting.project` to check the bulk rows
SCHEMA = "stormbuffer"
SHORT_CACHE = CACHE  # resolved before the run points HOME at its own folder (the workers inherit it as an argument)
SHORT_VECTORS = (
    "the real model's own vectors of each short record's one chunk, precomputed (bench/short_records.py); "
    "queries: held-out LongMemEval-S questions and SciFact test claims, embedded by the real model"
)


def short_vectors(records: int) -> str:
    """What a `--short` run's vectors are, derived ones labelled."""
    from short_records import REAL_RECORDS

    if records <= REAL_RECORDS:
        return SHORT_VECTORS
    return (f"records 0..{REAL_RECORDS - 1:,}: {SHORT_VECTORS.split('; ')[0]}; records {REAL_RECORDS:,}.."
            f"{records - 1:,} DERIVED: two of those records' bodies joined, their vector the unit sum of the two "
            f"real vectors (bench/short_records.py); {SHORT_VECTORS.split('; ')[1]}")  # fmt: skip


LOADED = ("records", "projection_records", "projection_chunks", "projection_postings")


class WeightedMixes(ReusedVectors):
    """The real model's identity and tokenizer; each text's vector a unit mix of three real vectors of a
    sample, chosen and weighted by a hash of the text (weights 1, 0..0.6, 0..0.6): distinct texts get
    distinct vectors, spread around the real ones."""

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = np.empty((len(texts), self.dimension), dtype="<f4")
        for at, text in enumerate(texts):
            digest = hashlib.sha256(text.encode()).digest()
            picks = [int.from_bytes(digest[offset : offset + 4], "little") % len(self._sample) for offset in (0, 4, 8)]
            weights = np.array([1.0, 0.6 * digest[12] / 255, 0.6 * digest[13] / 255], dtype="<f4")
            mixed = weights @ self._sample[picks]
            rows[at] = mixed / np.linalg.norm(mixed)
        return rows


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


@contextmanager
def heartbeat(what: str) -> Iterator[None]:
    """A line on stderr every HEARTBEAT seconds while `what` runs."""
    done = threading.Event()
    started = time.perf_counter()

    def beat() -> None:
        while not done.wait(HEARTBEAT):
            say(f"  … {what}: {time.perf_counter() - started:.0f} s")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def ms(values: list[float]) -> dict[str, float]:
    return {"p50": round(1000 * statistics.median(values), 2), "p95": round(1000 * percentile(values, 0.95), 2)}


# ---- the bulk load --------------------------------------------------------------------------


class Definitions:
    """The constraints and indexes of the loaded tables, read from the catalog, to drop for a load and
    recreate after it exactly as they were."""

    def __init__(self, cursor: Any) -> None:
        names = [f"{SCHEMA}.{table}" for table in LOADED]
        cursor.execute("SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid) FROM "
                       "pg_constraint WHERE conrelid = ANY(%s::regclass[]) AND contype IN ('p', 'u', 'f')",
                       (names,))  # fmt: skip
        self.constraints = cursor.fetchall()
        cursor.execute("SELECT i.indrelid::regclass::text, c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i "
                       "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = ANY(%s::regclass[]) AND NOT "
                       "EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)", (names,))  # fmt: skip
        self.indexes = cursor.fetchall()

    def drop(self, cursor: Any) -> None:
        for table, name, _kind, _definition in sorted(self.constraints, key=lambda item: item[2] != "f"):
            cursor.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
        for _table, name, _definition in self.indexes:
            cursor.execute(f"DROP INDEX {SCHEMA}.{name}")

    def restore(self, cursor: Any, table: str) -> None:
        """The keys and indexes of `table` (foreign keys come in `restore_references`)."""
        for owner, name, kind, definition in self.constraints:
            if owner == f"{SCHEMA}.{table}" and kind != "f":
                cursor.execute(f"ALTER TABLE {owner} ADD CONSTRAINT {name} {definition}")
        for owner, _name, definition in self.indexes:
            if owner == f"{SCHEMA}.{table}":
                cursor.execute(definition)

    def restore_references(self, cursor: Any, table: str) -> None:
        for owner, name, kind, definition in self.constraints:
            if owner == f"{SCHEMA}.{table}" and kind == "f":
                cursor.execute(f"ALTER TABLE {owner} ADD CONSTRAINT {name} {definition}")


VECTOR_FORMAT = "[" + ",".join(["%.9g"] * 384) + "]"  # float32 round-trips through 9 significant digits


def copy_text(values: tuple[Any, ...]) -> str:
    """One line of COPY's text format."""
    fields = []
    for value in values:
        if value is None:
            fields.append("\\N")
        elif isinstance(value, bytes):
            fields.append("\\\\x" + value.hex())
        elif isinstance(value, str):
            fields.append(value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
                          .replace("\r", "\\r"))  # fmt: skip
        else:
            fields.append(str(value))
    return "\t".join(fields) + "\n"


class Batches:
    """Builds the COPY text of a range of records in a worker process: the record rows and their projection,
    with the engine's own chunking, terms and vectors."""

    embedder: Any = None
    scope = ""
    record: Any = None

    @classmethod
    def start(cls, cache: str, sample: Any, scope: str, short: int, short_cache: str) -> None:
        from stormbuffer.embedding import load_embedder

        global SHORT_CACHE
        SHORT_CACHE, cls.scope = Path(short_cache), scope
        cls.embedder, cls.record = source(load_embedder(Path(cache)), sample, short)

    @classmethod
    def build(cls, span: tuple[int, int]) -> dict[str, Any]:
        """`rows` of the span; an error comes back as a plain RuntimeError, which the pool can always pass
        on (an exception it cannot unpickle would leave the load waiting forever)."""
        try:
            return cls.rows(span)
        except Exception as exc:
            raise RuntimeError(f"records {span[0]}..{span[1] - 1}: {type(exc).__name__}: {exc}") from None

    @classmethod
    def rows(cls, span: tuple[int, int]) -> dict[str, Any]:
        from stormbuffer.core.codec import render_markdown
        from stormbuffer.core.records import normalize
        from stormbuffer.index import postings
        from stormbuffer.index.chunking import VECTOR_CHUNKS
        from stormbuffer.index.sync import _chunk_vectors, record_chunks

        embedder, scope, make = cls.embedder, cls.scope, cls.record
        cpu = dict.fromkeys(("records", "chunks", "vectors", "postings"), 0.0)
        out: dict[str, list[str]] = {table: [] for table in LOADED}
        counts = {"records": 0, "chunks": 0, "vectors": 0, "postings": 0, "terms": 0}
        for index in range(*span):
            at = time.process_time()
            record = make(index, scope)
            path = f"records/{record.id}.md"
            out["records"].append(
                copy_text(
                    (
                        scope,
                        record.id,
                        path,
                        render_markdown(record).encode(),
                        record.scope,
                        record.kind,
                        record.status,
                        record.title,
                        normalize(record.title),
                        1,
                    )
                )
            )
            out["projection_records"].append(copy_text((
                scope, record.id, record.scope, path, record.title, record.kind, record.status, record.access,
                record.created_at.render(), _json(list(record.aliases)),
                _json([source.to_json() for source in record.sources]))))  # fmt: skip
            now = time.process_time()
            cpu["records"], at = cpu["records"] + now - at, now
            rows = record_chunks(record, path, embedder.token_count)
            now = time.process_time()
            cpu["chunks"], at = cpu["chunks"] + now - at, now
            wanted = [row for row in rows if row[1] < VECTOR_CHUNKS]
            matrix, sentences = _chunk_vectors(embedder, [(row[4], row[3]) for row in wanted]) if wanted else ([], [])
            vectors = [VECTOR_FORMAT % tuple(vector) for vector in matrix.tolist()] if wanted else []
            now = time.process_time()
            cpu["vectors"], at = cpu["vectors"] + now - at, now
            weighted = [postings.weighted_terms(row[5]) for row in rows]
            for term_counts, length in weighted:  # a block of lines per chunk, its id put in front by `numbered`
                stored = min(length, postings.MAX_COUNT)
                out["projection_postings"].append("".join(f"{scope}\t{copy_text((term,))[:-1]}\t"
                                                          f"{min(count, postings.MAX_COUNT)}\t{stored}\n"
                                                          for term, count in term_counts.items()))  # fmt: skip
                counts["postings"] += len(term_counts)
                counts["terms"] += length
            now = time.process_time()
            cpu["postings"], at = cpu["postings"] + now - at, now
            for position, (row, (_counts, length)) in enumerate(zip(rows, weighted, strict=True)):
                vector, blob = (vectors[position], sentences[position]) if position < len(wanted) else (None, None)
                out["projection_chunks"].append(copy_text((scope, *row, length, vector, blob)))
            cpu["chunks"] += time.process_time() - at
            counts["records"] += 1
            counts["chunks"] += len(rows)
            counts["vectors"] += len(wanted)
        text = {table: "".join(out[table]).encode() for table in ("records", "projection_records")}
        return {"text": text, "chunks": out["projection_chunks"], "postings": out["projection_postings"], "cpu": cpu,
                "counts": counts}  # fmt: skip


def source(real: Any, sample: Any, short: int) -> tuple[Any, Any]:
    """The embedder and the record maker `(index, scope) → Record` of a load: with `short`, the first
    `short` short records of real sentences and their cached real vectors (bench/short_records.py);
    otherwise the benchmark corpus (bench/corpus.py) and weighted mixes of `sample`'s real vectors."""
    if not short:
        return WeightedMixes(real, sample), make_record
    from short_records import Precomputed, cached, make_short_record

    pairs, vectors, _manifest = cached(short, SHORT_CACHE)
    return Precomputed(real, pairs, vectors), lambda index, scope: make_short_record(index, scope, pairs[index])


def numbered(blocks: list[str], first: int) -> bytes:
    """COPY text of blocks of lines (one block per chunk), each line led by its chunk's id: ids follow
    one another from `first` in load order, as the engine's identity column gives them."""
    parts = []
    for number, block in enumerate(blocks, first):
        if block:
            parts.append(f"{number}\t" + block[:-1].replace("\n", f"\n{number}\t") + "\n")
    return "".join(parts).encode()


COLUMNS = {
    "records": "store, id, path, markdown, scope, kind, status, title, title_key, version",
    "projection_records": "store, id, scope, path, title, kind, status, access, created_at, aliases, sources",
    "projection_chunks": "id, store, record_id, ordinal, heading, text, embed_text, retrieval_text, token_count, "
                         "word_count, embed_hash, length, embedding, sentence_vectors",
    "projection_postings": "chunk, store, term, count, length",
}  # fmt: skip


def load(
    url: str,
    scope: str,
    count: int,
    cache: Path,
    sample: Any,
    short: int,
    *,
    identity: str,
    batch: int,
    workers: int,
    guard: Path,
    seconds: float,
) -> dict[str, Any]:
    """Records 0..count-1 and their projection, in bulk; returns the seconds of each part and the totals."""
    import multiprocessing

    import psycopg

    cpu = dict.fromkeys(("records", "chunks", "vectors", "postings"), 0.0)
    copy_s = dict.fromkeys(LOADED, 0.0)
    indexes: dict[str, float] = {}
    totals = {"records": 0, "chunks": 0, "vectors": 0, "postings": 0, "terms": 0}
    started = time.perf_counter()
    spans = [(first, min(count, first + batch)) for first in range(0, count, batch)]
    context = multiprocessing.get_context("forkserver")
    with (
        psycopg.connect(url) as conn,
        conn.cursor() as cursor,
        context.Pool(workers, Batches.start, (str(cache), sample, scope, short, str(SHORT_CACHE))) as pool,
    ):
        definitions = Definitions(cursor)
        definitions.drop(cursor)
        conn.commit()
        next_id = 1
        for built in pool.imap(Batches.build, spans):
            free = shutil.disk_usage(guard).free / 2**30
            if free < MIN_FREE_GB or time.perf_counter() - started > seconds:
                say(f"stopping the load at {totals['records']:,} records: {free:.1f} GB left on the disk, "
                    f"{time.perf_counter() - started:.0f} s spent")  # fmt: skip
                break
            text = {**built["text"], "projection_chunks": numbered(built["chunks"], next_id),
                    "projection_postings": numbered(built["postings"], next_id)}  # fmt: skip
            next_id += len(built["chunks"])
            for table in LOADED:
                at = time.perf_counter()
                with cursor.copy(f"COPY {SCHEMA}.{table} ({COLUMNS[table]}) FROM STDIN") as copy:
                    copy.write(text[table])
                copy_s[table] += time.perf_counter() - at
            conn.commit()
            for part, value in built["cpu"].items():
                cpu[part] += value
            for part, value in built["counts"].items():
                totals[part] += value
            elapsed = time.perf_counter() - started
            rate = totals["records"] / elapsed
            say(f"loaded {totals['records']:,} of {count:,} records ({totals['chunks']:,} chunks, "
                f"{totals['postings']:,} postings): {rate:,.0f} records/s, {(count - totals['records']) / rate:,.0f} "
                "s to go")  # fmt: skip
        load_s = time.perf_counter() - started
        cursor.execute("SET maintenance_work_mem = '1GB'")
        cursor.execute("SET max_parallel_maintenance_workers = 1")
        for table in LOADED:
            at = time.perf_counter()
            with heartbeat(f"indexing {table}"):
                definitions.restore(cursor, table)
                conn.commit()
            indexes[table] = time.perf_counter() - at
            say(f"indexed {table} in {indexes[table]:.1f} s")
        for table in LOADED:
            at = time.perf_counter()
            with heartbeat(f"checking the references of {table}"):
                definitions.restore_references(cursor, table)
                conn.commit()
            indexes[f"{table} references"] = time.perf_counter() - at
        at = time.perf_counter()
        cursor.execute(f"SELECT setval(pg_get_serial_sequence('{SCHEMA}.projection_chunks', 'id'), "
                       f"(SELECT coalesce(max(id), 1) FROM {SCHEMA}.projection_chunks))")  # fmt: skip
        cursor.execute(f"INSERT INTO {SCHEMA}.projection_stats (store, chunks, terms) VALUES (%s, %s, %s)",
                       (scope, totals["chunks"], totals["terms"]))  # fmt: skip
        cursor.execute(f"INSERT INTO {SCHEMA}.projection_settings (store, key, value) VALUES (%s, %s, %s)",
                       (scope, "vector_model", identity))  # fmt: skip
        cursor.execute(f"INSERT INTO {SCHEMA}.{TERMS_TABLE} (store, term, chunks) {TERM_COUNTS}")
        conn.commit()
        conn.autocommit = True
        with heartbeat("VACUUM ANALYZE"):
            for table in (*LOADED, "projection_stats", "projection_settings", TERMS_TABLE):
                cursor.execute(f"VACUUM (ANALYZE) {SCHEMA}.{table}")
        statistics_s = time.perf_counter() - at
        say(f"statistics (VACUUM ANALYZE) in {statistics_s:.1f} s")
    return {"load_s": load_s, "worker_cpu_s": cpu, "copy_s": copy_s, "indexes": indexes,
            "statistics_s": statistics_s, "totals": totals}  # fmt: skip


def build_hnsw(engine: Any, memory: str, settings: tuple[int, int]) -> float:
    """The engine's HNSW index (`ensure_vector_index`) with `settings` (m, ef_construction), built in
    memory by one maintenance worker at most; an index already there with other settings is dropped first."""
    from sqlalchemy import text

    from stormbuffer.engines.postgresql.projecting import HNSW_INDEX, ensure_vector_index

    started = time.perf_counter()
    with heartbeat("building the HNSW index"), engine.begin() as conn:
        if hnsw_built(engine) not in (None, settings):
            conn.execute(text(f"DROP INDEX {SCHEMA}.{HNSW_INDEX}"))
        conn.execute(text(f"SET LOCAL maintenance_work_mem = '{memory}'"))
        conn.execute(text("SET LOCAL max_parallel_maintenance_workers = 1"))
        if not ensure_vector_index(conn, m=settings[0], ef_construction=settings[1]):
            say("fewer vectors than HNSW_FROM: searches stay exact")
    return time.perf_counter() - started


def hnsw_built(engine: Any) -> tuple[int, int] | None:
    """(m, ef_construction) of the HNSW index in the database, None when there is none."""
    from sqlalchemy import text

    with engine.connect() as conn:
        options = conn.execute(text("SELECT reloptions FROM pg_class WHERE oid = to_regclass("
                                    "'stormbuffer.projection_chunks_embedding_hnsw')")).scalar()  # fmt: skip
    if options is None:
        return None
    found = dict(option.split("=", 1) for option in options)
    return int(found["m"]), int(found["ef_construction"])


def same_as_engine(engine: Any, scope: str, embedder: Any, make: Any, count: int) -> bool:
    """Project `CHECKED` records again with `projecting.project` (rolled back): the same chunk and posting
    rows as the bulk load's (chunk ids aside)?"""
    from sqlalchemy import text

    from stormbuffer.engines.postgresql.projecting import project

    picks = sorted({(index * 7919) % count for index in range(min(CHECKED, count))})
    records = [make(index, scope) for index in picks]
    ids = [record.id for record in records]
    chunks = text(f"SELECT record_id, ordinal, heading, text, embed_text, retrieval_text, token_count, word_count, "
                  f"embed_hash, length, embedding::text, sentence_vectors FROM {SCHEMA}.projection_chunks WHERE "
                  "store = :store AND record_id = ANY(:ids) ORDER BY record_id, ordinal")  # fmt: skip
    terms = text(f"SELECT c.record_id, c.ordinal, p.term, p.count, p.length FROM {SCHEMA}.projection_postings p "
                 f"JOIN {SCHEMA}.projection_chunks c ON c.id = p.chunk WHERE c.store = :store AND "
                 "c.record_id = ANY(:ids) ORDER BY 1, 2, 3")  # fmt: skip
    stats = text(f"SELECT chunks, terms FROM {SCHEMA}.projection_stats WHERE store = :store")
    with engine.connect() as conn, conn.begin() as transaction:
        values = {"store": scope, "ids": ids}
        before = [conn.execute(query, values).all() for query in (chunks, terms, stats)]
        project(conn, scope, [(f"records/{record.id}.md", record) for record in records],
                dimension=embedder.dimension, count_tokens=embedder.token_count, embedder=embedder)  # fmt: skip
        after = [conn.execute(query, values).all() for query in (chunks, terms, stats)]
        transaction.rollback()
    return before == after and bool(before[0])


# ---- the measurements ------------------------------------------------------------------------


class Warm:
    """An embedder slot holding the real model, as a long-running process keeps it."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder

    def get(self) -> tuple[Any, str | None]:
        return self.embedder, None


def recalls(session: Any, queries: list[str], real: Any) -> dict[str, Any]:
    from stormbuffer.protocol.reads import search

    times: list[float] = []
    embedding: list[float] = []
    for round_ in range(2):  # a warm round, then the timed one
        for query in queries:
            started = time.perf_counter()
            hits = search({"query": query, "limit": 10}, session)
            if round_:
                times.append(time.perf_counter() - started)
                started = time.perf_counter()
                real.embed([query])
                embedding.append(time.perf_counter() - started)
            if not hits:
                raise SystemExit(f"no hits for {query!r}")
        say(f"recall round {round_ + 1}: p50 {1000 * statistics.median(times or [0.0]):.1f} ms")
    slowest = sorted(zip(times, queries, strict=True), reverse=True)[:3]
    return {"hybrid_ms": ms(times), "query_embedding_ms": ms(embedding),
            "slowest": [{"query": query, "ms": round(1000 * value, 1)} for value, query in slowest]}  # fmt: skip


def hnsw_recall(engine: Any, paths: Any, scope: str, queries: list[str], real: Any, sweep: list[int]) -> dict[str, Any]:
    """Recall@10 (the 10 nearest records' chunks) of the normal reader against the `exact=True` reader: when
    asked for 10 records, and when asked for a hybrid recall's depth (`CANDIDATE_RECORDS`), whose
    first 10 are what fusion sees first; then for 10 records with each of `sweep` as the fewest
    candidates a search considers (`projection.MIN_EF_SEARCH`, set for the measurement only)."""
    from stormbuffer.engines.postgresql import projection as pg
    from stormbuffer.retrieval.hits import SearchOptions
    from stormbuffer.retrieval.search import CANDIDATE_RECORDS, effective_options

    options = effective_options([paths], SearchOptions(limit=10, mode="hybrid"))
    reading = partial(pg.reading, engine, scope, paths.root)
    engine_least = pg.MIN_EF_SEARCH
    depths = {"10_records": (10, engine_least), f"{CANDIDATE_RECORDS}_records": (CANDIDATE_RECORDS, engine_least),
              **{f"10_records_ef_search_{least}": (10, least) for least in sweep}}  # fmt: skip
    shares: dict[str, list[float]] = {name: [] for name in depths}
    tied: dict[str, list[float]] = {name: [] for name in depths}
    times: dict[str, list[float]] = {"exact": [], **{f"index_{name}": [] for name in depths}}
    indexed = False
    for vector in real.embed(queries):
        with reading(exact=True) as projection:
            search = projection.vector_search(real)
            assert search is not None
            started = time.perf_counter()
            exact = search.nearest(vector, options, 10)
            times["exact"].append(time.perf_counter() - started)
        wanted = exact.chunks
        # a chunk as near as the exact 10th is as good as it (equal distances order by chunk id only in exact)
        bar = min(exact.similarities, default=1.0) - 1e-6
        for name, (depth, least) in depths.items():
            pg.MIN_EF_SEARCH = least
            try:
                with reading() as projection:
                    indexed = indexed or projection.indexed
                    search = projection.vector_search(real)
                    assert search is not None
                    started = time.perf_counter()
                    found = search.nearest(vector, options, depth)
                    times[f"index_{name}"].append(time.perf_counter() - started)
            finally:
                pg.MIN_EF_SEARCH = engine_least
            shares[name].append(len(set(found.chunks[:10]) & set(wanted)) / max(1, len(wanted)))
            near = sum(value >= bar for value in found.similarities[:10])
            tied[name].append(min(len(wanted), near) / max(1, len(wanted)))
    return {"recall_at_10": {name: round(statistics.mean(values), 4) for name, values in shares.items()},
            "recall_at_10_ties_equal": {name: round(statistics.mean(values), 4) for name, values in tied.items()},
            "ef_search": {name: max(least, min(pg.MAX_EF_SEARCH, 4 * depth))
                          for name, (depth, least) in depths.items()},
            "hnsw_used": indexed, "nearest_ms": {name: ms(values) for name, values in times.items()}}  # fmt: skip


def plan_nodes(node: dict[str, Any]) -> list[str]:
    """A plan's nodes, depth first: type, index or table, actual rows and time."""
    name = node.get("Index Name") or node.get("Relation Name") or ""
    line = f"{node['Node Type']} {name} rows={node.get('Actual Rows')} ms={node.get('Actual Total Time')}"
    return [line, *(found for child in node.get("Plans", []) for found in plan_nodes(child))]


def explained(url: str, session: Any, query: str) -> list[dict[str, Any]]:
    """Where one recall's database time goes: its statements, captured from the engine's pool, run again
    in order in one transaction, each query under EXPLAIN (ANALYZE, BUFFERS)."""
    import json

    import psycopg
    from sqlalchemy import Engine, event

    from stormbuffer.engines.postgresql import projection
    from stormbuffer.protocol.reads import search

    captured: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        captured.append((statement, parameters))

    fetched = projection._fetched

    def capture_fetched(driver: Any, sql: str, values: Any) -> list[Any]:  # the reader's statements, past SQLAlchemy
        captured.append((sql, values))
        return fetched(driver, sql, values)

    beside_rows = projection.Beside.rows

    def capture_beside(beside: Any, sql: str, values: Any = None, *, settings: str = "") -> list[Any]:
        if settings:  # the vector search's `SET LOCAL hnsw.…`, which it sends only when they change
            captured.append((settings, None))
        if beside.opened is None:  # its first statement goes in the round trip that opens its connection
            captured.append((sql, values))
        return beside_rows(beside, sql, values, settings=settings)

    event.listen(Engine, "before_cursor_execute", capture)  # every engine: the reader's pool is the store's
    projection._fetched = capture_fetched  # type: ignore[assignment]
    projection.Beside.rows = capture_beside  # type: ignore[method-assign]
    try:
        search({"query": query, "limit": 10}, session)
    finally:
        event.remove(Engine, "before_cursor_execute", capture)
        projection._fetched = fetched  # type: ignore[assignment]
        projection.Beside.rows = beside_rows  # type: ignore[method-assign]
    steps: list[dict[str, Any]] = []
    with psycopg.connect(url) as conn, conn.cursor() as cursor:
        cursor.execute("SET random_page_cost = 1.1")  # as a reader's opening statement sets it
        for statement, parameters in captured:
            first = statement.lstrip().split(None, 1)[0].upper()
            if first not in ("SELECT", "WITH"):
                cursor.execute(statement, parameters)
                continue
            cursor.execute("SAVEPOINT step")
            try:
                cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", parameters)
            except psycopg.Error as exc:  # said, and the next statement explained
                cursor.execute("ROLLBACK TO SAVEPOINT step")
                steps.append({"statement": " ".join(statement.split())[:160], "error": str(exc)[:200]})
                continue
            row = cursor.fetchone()
            assert row is not None
            plan = row[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            top = plan[0]["Plan"]
            steps.append({"statement": " ".join(statement.split())[:160], "execution_ms": plan[0]["Execution Time"],
                          "rows": top.get("Actual Rows"), "shared_hit": top.get("Shared Hit Blocks"),
                          "shared_read": top.get("Shared Read Blocks"), "nodes": plan_nodes(top)[:12]})  # fmt: skip
        conn.rollback()
    return steps


def remembers(session: Any, count: int) -> dict[str, Any]:
    from stormbuffer.protocol.writes import remember

    times = []
    source = {"kind": "conversation", "reference": "bench:pg_scale", "actor": "agent"}
    for number in range(count + 3):
        request = {"title": f"Scale note {number} on the ledger database", "kind": "fact", "source": source,
                   "body": f"The ledger database needed a larger pool during load test {number}; the fix was "
                           "to cap retries with jitter."}  # fmt: skip
        started = time.perf_counter()
        outcome = remember(request, session)
        session.written()
        if number >= 3:  # the first writes open the pool and load the tokenizer
            times.append(time.perf_counter() - started)
        if outcome.get("outcome") != "requires_approval":
            raise SystemExit(f"remember {number}: {outcome}")
    return ms(times)


def sizes(engine: Any) -> dict[str, Any]:
    from sqlalchemy import text

    with engine.connect() as conn:
        database = conn.execute(text("SELECT pg_database_size(current_database())")).scalar()
        tables = conn.execute(text(
            "SELECT c.relname, pg_total_relation_size(c.oid), pg_relation_size(c.oid), pg_indexes_size(c.oid) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE n.nspname = '{SCHEMA}' AND c.relkind = 'r' ORDER BY 2 DESC")).all()  # fmt: skip
        hnsw = conn.execute(
            text("SELECT pg_relation_size(to_regclass('stormbuffer.projection_chunks_embedding_hnsw'))")
        )
        hnsw_bytes = hnsw.scalar()
    mb = 2**20
    return {"database_mb": round(database / mb, 1), "hnsw_index_mb": round((hnsw_bytes or 0) / mb, 1),
            "tables_mb": {name: {"total": round(total / mb, 1), "heap": round(heap / mb, 1),
                                 "indexes": round(index / mb, 1)}
                          for name, total, heap, index in tables if total}}  # fmt: skip


def tune(server: PostgresServer, shared_buffers: str) -> None:
    """A larger buffer cache than the test server's default (128 MB), as a server holding a large
    store would have; then a restart (pg_ctl reuses the server's options)."""
    server.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
    server._run(server.programs / "pg_ctl", "-D", server.data, "-l", server.base / "server.log", "-w", "restart")


def hnsw_option(value: str) -> tuple[int, int]:
    m, ef_construction = (int(part) for part in value.split("/"))
    return m, ef_construction


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--writes", type=int, default=100)
    parser.add_argument("--sample", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1000, help="records a worker builds at a time")
    parser.add_argument("--workers", type=int, default=2, help="processes building the rows")
    parser.add_argument(
        "--load-seconds",
        type=float,
        default=3600.0,
        help="bound of the load: past it the rest is measured on what was loaded",
    )
    parser.add_argument("--hnsw-memory", default="4GB", help="maintenance_work_mem of the HNSW build")
    parser.add_argument("--shared-buffers", default="1GB")
    parser.add_argument(
        "--short",
        action="store_true",
        help="short records of real sentences with their cached real "
        "vectors (bench/short_records.py), queried by held-out real questions and claims",
    )
    parser.add_argument("--data", type=Path, default=DEFAULT, help="the benchmark data (--short's queries)")
    parser.add_argument("--hnsw", type=hnsw_option, help="M/EF_CONSTRUCTION of the HNSW index (default: the engine's)")
    parser.add_argument(
        "--ef-sweep",
        type=lambda value: [int(part) for part in value.split(",")],
        default=[],
        help="also measure HNSW recall@10 with these least ef_search values (comma-separated)",
    )
    parser.add_argument("--keep", type=Path, help="build in this new folder and keep the database there")
    parser.add_argument("--reuse", type=Path, help="measure the database a --keep run left in this folder")
    args = parser.parse_args()
    if args.keep and (args.reuse or args.keep.exists()):
        parser.error("--keep wants a new folder, and no --reuse")

    from sqlalchemy import create_engine

    from stormbuffer.core.repository import Repository
    from stormbuffer.core.stores import DATABASE_URL_ENV, PlatformDirs, View, initialize_store, resolve_store
    from stormbuffer.embedding import acquire_model, load_embedder
    from stormbuffer.engines.postgresql.projecting import HNSW_EF_CONSTRUCTION, HNSW_FROM, HNSW_M
    from stormbuffer.engines.postgresql.projection import MIN_EF_SEARCH
    from stormbuffer.index.freshness import FreshnessRegistry
    from stormbuffer.index.projection import model_identity
    from stormbuffer.protocol.session import Session

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: the server and its files go too
    version = version_seconds()
    tried = f"-m{args.hnsw[0]}-ef{args.hnsw[1]}" if args.hnsw else ""
    saved = RESULTS / f"pg_scale-{'short-' if args.short else ''}{args.records}{tried}.json"

    def milestone(reached: dict[str, Any]) -> None:  # what a long run reached, should it not finish
        save(saved, {"records_wanted": args.records, "sbuf_version_s": round(version, 3), **reached,
                     "load_average": list(os.getloadavg())})  # fmt: skip

    kept = args.keep or args.reuse
    work = kept / "work" if kept else Path(tempfile.mkdtemp(prefix="sbuf-pg-scale-"))
    if not args.reuse:
        for folder in ("home", "data", "cache", "project"):
            (work / folder).mkdir(parents=True)
    os.environ.update(HOME=str(work / "home"), XDG_DATA_HOME=str(work / "data"), XDG_CACHE_HOME=str(work / "cache"),
                      STORMBUFFER_NO_DAEMON="1")  # fmt: skip
    dirs = PlatformDirs(work / "data", work / "cache")
    say("acquiring the model …")
    acquire_model(dirs.shared_cache)
    real = load_embedder(dirs.shared_cache)
    sample = None if args.short else real.embed([make_record(i, "project:x").body[:400] for i in range(args.sample)])
    embedder, make = source(real, sample, args.records if args.short else 0)
    say("starting PostgreSQL (tests/postgres.py) …")
    server = PostgresServer.resume(kept / "pg") if args.reuse else PostgresServer.start(kept / "pg" if kept else None)
    try:
        paths = resolve_store(View.PROJECT, work / "project", dirs)
        if args.reuse:
            built = json.loads((kept / "kept.json").read_text())
            url = os.environ[DATABASE_URL_ENV] = server.socket_url(built["database"])
            loaded, load_build_s = built["loaded"], built["load_build_s"]
            say(f"measuring the {loaded['totals']['records']:,} records kept in {kept}")
        else:
            tune(server, args.shared_buffers)
            url = os.environ[DATABASE_URL_ENV] = server.create_database()
            initialize_store(paths, engine="postgresql")
            say(f"loading {args.records:,} records in batches of {args.batch:,} …")
            started = time.perf_counter()
            loaded = load(url, Repository(paths).scope, args.records, dirs.shared_cache, sample,
                          args.records if args.short else 0, identity=model_identity(real), batch=args.batch,
                          workers=args.workers, guard=server.base, seconds=args.load_seconds)  # fmt: skip
            load_build_s = time.perf_counter() - started
            milestone({"reached": "loaded", **loaded["totals"], "load_s": round(loaded["load_s"], 1)})
        scope = Repository(paths).scope
        engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
        settings = args.hnsw or (HNSW_M, HNSW_EF_CONSTRUCTION)
        rebuilt = hnsw_built(engine) != settings
        hnsw_s = build_hnsw(engine, args.hnsw_memory, settings) if rebuilt else built["hnsw_s"]
        build_s = load_build_s + hnsw_s
        say(f"HNSW index (m {settings[0]}, ef_construction {settings[1]}) in {hnsw_s:.1f} s"
            f"{'' if rebuilt else ' (kept)'}; the whole build in {build_s:.1f} s")  # fmt: skip
        if kept and rebuilt:
            (kept / "kept.json").write_text(json.dumps({"database": url.split("@/", 1)[1].split("?", 1)[0],
                                                        "loaded": loaded, "load_build_s": load_build_s,
                                                        "hnsw_s": hnsw_s}))  # fmt: skip
        milestone({"reached": "indexed", **loaded["totals"], "load_s": round(loaded["load_s"], 1),
                   "hnsw_index_s": round(hnsw_s, 1), "build_s": round(build_s, 1), **sizes(engine)})  # fmt: skip
        same = same_as_engine(engine, scope, embedder, make, loaded["totals"]["records"])
        say(f"bulk rows equal projecting.project's: {same}")
        queries = held_out(require(args.data))[: args.queries] if args.short else query_texts(args.queries)
        session = Session(View.PROJECT, paths, dirs, Warm(real), FreshnessRegistry())
        say("recall …")
        recall = recalls(session, queries, real)
        say("HNSW recall@10 against exact …")
        accuracy = hnsw_recall(engine, paths, scope, queries, real, args.ef_sweep)
        say("warm remember …")
        writes = remembers(session, args.writes) if args.writes else {}
        measured_sizes = sizes(engine)
        plans: dict[str, Any] = {}
        for query in [item["query"] for item in recall["slowest"]] + queries[:1]:
            try:
                plans[query] = explained(url, session, query)
            except Exception as exc:  # a diagnosis: what it could not explain is said, the run goes on
                plans[query] = [{"error": f"{type(exc).__name__}: {str(exc)[:200]}"}]
        session.freshness.close()
        engine.dispose()
    finally:
        server.stop(remove=not kept)
        if not kept:
            shutil.rmtree(work, ignore_errors=True)
    rounded = {name: round(value, 1) for name, value in loaded["copy_s"].items()}
    report = {
        "records_wanted": args.records, **loaded["totals"],
        "vectors_are": short_vectors(args.records) if args.short else (
            f"unit mixes of three of {args.sample} real-model vectors (hash-chosen and weighted) per chunk and "
            "sentence (labelled: not the model's own vectors); queries embedded by the real model"),
        "hnsw": {"from_vectors": HNSW_FROM, "m": settings[0], "ef_construction": settings[1],
                 "ef_search": f"max({MIN_EF_SEARCH}, 4 × wanted records), iterative scan relaxed_order"},
        "recall": recall, "hnsw_vs_exact": accuracy, "remember_ms": writes,
        "build_s": {"load_wall": round(loaded["load_s"], 1), "index_rebuild": round(sum(loaded["indexes"].values()), 1),
                    "statistics": round(loaded["statistics_s"], 1), "hnsw_index": round(hnsw_s, 1),
                    "total": round(build_s, 1)},
        "build_parts_s": {
            "worker_cpu": {name: round(value, 1) for name, value in loaded["worker_cpu_s"].items()},
            "copy": rounded, "index_rebuild": {name: round(value, 1) for name, value in loaded["indexes"].items()}},
        "workers": args.workers,
        "same_rows_as_projecting_project": same,
        **measured_sizes,
        "server": {"shared_buffers": args.shared_buffers, "hnsw_maintenance_work_mem": args.hnsw_memory,
                   "max_parallel_maintenance_workers": 1},
        "sbuf_version_s": round(version, 3),
        "ratios_to_version": {"recall_p50": round(recall["hybrid_ms"]["p50"] / 1000 / version, 2),
                              "remember_p50": round(writes["p50"] / 1000 / version, 2) if writes else None},
        "load_average": list(os.getloadavg()),
        "explained": plans,
    }  # fmt: skip
    save(saved, report)
    print(f"{loaded['totals']['records']:,} records: recall p50 {recall['hybrid_ms']['p50']} ms, HNSW recall@10 "
          f"{accuracy['recall_at_10']}, remember p50 {writes.get('p50')} ms, build {build_s:.0f} s, "
          f"database {measured_sizes['database_mb']} MB, sbuf --version {version * 1000:.0f} ms")  # fmt: skip


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


if __name__ == "__main__":
    main()

"""HNSW recall@10 against exact search for several index settings (m, ef_construction, ef_search).

Starts a real PostgreSQL with pgvector (`tests/postgres.py`), fills one table with `--vectors` vectors of
the benchmark corpus's paragraphs (bench/corpus.py), each a `WeightedMixes` vector of bench/pg_scale.py
(a unit mix of three of `--sample` real-model vectors, chosen and weighted by a hash of the text:
labelled, not the model's own vectors), and embeds the corpus queries with the real model. For each
`--settings` m/ef_construction it builds the index (timed) and, with sequential scans off, compares
the 10 nearest rows at each `--ef-search` with the exact 10 (ordered by distance, then id). Saves
bench/results/hnsw_settings-VECTORS-SAMPLE.json.

Usage: python bench/hnsw_settings.py [--vectors 100000] [--sample 2048] [--settings 16/64,32/128]
       [--ef-search 40,200,400]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
from corpus import make_record  # noqa: E402
from hnsw_recall import query_texts, version_seconds  # noqa: E402
from machine import save  # noqa: E402
from pg_scale import WeightedMixes  # noqa: E402

from tests.postgres import PostgresServer  # noqa: E402


def paragraphs(count: int) -> list[str]:
    found: list[str] = []
    index = 0
    while len(found) < count:
        found += [part for part in make_record(index, "project:x").body.split("\n\n") if part.strip()]
        index += 1
    return found[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--sample", type=int, default=2048)
    parser.add_argument("--settings", default="16/64,32/128", help="m/ef_construction pairs")
    parser.add_argument("--ef-search", default="40,200,400")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()

    import psycopg

    from stormbuffer.embedding import acquire_model, load_embedder

    version = version_seconds()
    work = Path(tempfile.mkdtemp(prefix="sbuf-hnsw-settings-"))
    acquire_model(work)
    real = load_embedder(work)
    sample = real.embed([make_record(index, "project:x").body[:400] for index in range(args.sample)])
    vectors = WeightedMixes(real, sample).embed(paragraphs(args.vectors))
    queries = real.embed(query_texts(args.queries)).tolist()
    results: list[dict[str, Any]] = []
    server = PostgresServer.start()
    try:
        with psycopg.connect(server.create_database(), autocommit=True) as conn:
            conn.execute(f"CREATE TABLE t (id bigint PRIMARY KEY, e vector({real.dimension}))")
            with conn.cursor().copy("COPY t (id, e) FROM STDIN") as copy:
                for number, vector in enumerate(vectors.tolist()):
                    copy.write(f"{number}\t{vector}\n")
            nearest = "SELECT id FROM t ORDER BY e <=> %s::vector"
            exact = [[row[0] for row in conn.execute(f"{nearest}, id LIMIT 10", (str(q),))] for q in queries]
            conn.execute("SET maintenance_work_mem = '2GB'")
            conn.execute("SET max_parallel_maintenance_workers = 1")
            for setting in args.settings.split(","):
                m, ef_construction = (int(part) for part in setting.split("/"))
                conn.execute("DROP INDEX IF EXISTS t_hnsw")
                started = time.perf_counter()
                conn.execute(f"CREATE INDEX t_hnsw ON t USING hnsw (e vector_cosine_ops) WITH (m = {m}, "
                             f"ef_construction = {ef_construction})")  # fmt: skip
                built = time.perf_counter() - started
                conn.execute("SET enable_seqscan = off")
                for ef in (int(part) for part in args.ef_search.split(",")):
                    conn.execute(f"SET hnsw.ef_search = {ef}")
                    shares, times = [], []
                    for q, wanted in zip(queries, exact, strict=True):
                        started = time.perf_counter()
                        found = [row[0] for row in conn.execute(f"{nearest} LIMIT 10", (str(q),))]
                        times.append(time.perf_counter() - started)
                        shares.append(len(set(found) & set(wanted)) / len(wanted))
                    results.append({"m": m, "ef_construction": ef_construction, "build_s": round(built, 1),
                                    "ef_search": ef, "recall_at_10": round(statistics.mean(shares), 4),
                                    "p50_ms": round(1000 * statistics.median(times), 2)})  # fmt: skip
                    print(results[-1], file=sys.stderr, flush=True)
                conn.execute("RESET enable_seqscan")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    save(ROOT / "bench" / "results" / f"hnsw_settings-{args.vectors}-{args.sample}.json", {
        "vectors": args.vectors, "queries": len(queries),
        "vectors_are": f"unit mixes of three of {args.sample} real-model vectors (hash-chosen and weighted) per "
                       "paragraph (labelled); queries embedded by the real model",
        "results": results, "sbuf_version_s": round(version, 3)})  # fmt: skip


if __name__ == "__main__":
    main()

"""Recall@10 of the PostgreSQL projection's HNSW index against exact search, on real-model vectors.

Starts a real PostgreSQL with pgvector (the test server of `tests/postgres.py`), projects `--records`
records of the benchmark corpus (bench/corpus.py) with the real embedding model through the
projection's own write path (`engines.postgresql.projecting.project`), builds the HNSW index
(`vector_cosine_ops`, m=16, ef_construction=64), then for each query (the corpus queries and phrases
of its systems, causes and fixes, embedded by the model) compares the 10 nearest chunks found
through the index (at several `hnsw.ef_search`; sequential scans are switched off so that the
planner cannot answer a small table without it) with the exact 10. Reports recall@10, the median
query time of each, the projection and index build times and the database size, with `sbuf --version`
timed in the same run. Saves bench/results/hnsw_recall.json.

Usage: python bench/hnsw_recall.py [--records 1000] [--queries 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
from corpus import ACTIONS, CAUSES, FIXES, QUERIES, SYSTEMS, make_record  # noqa: E402

from tests.postgres import PostgresServer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "hnsw_recall.json"
EF_SEARCH = (40, 100, 200)
BATCH = 100  # records per projecting transaction


def version_seconds(runs: int = 5) -> float:
    """Median wall time of `sbuf --version` on this machine now."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([str(Path(sys.executable).parent / "sbuf"), "--version"], capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def query_texts(count: int) -> list[str]:
    phrases = [*QUERIES, *SYSTEMS, *ACTIONS, *CAUSES, *FIXES]
    texts = list(dict.fromkeys(phrase.replace("{system}", "service").replace("{slug}", "service")
                               for phrase in phrases))  # fmt: skip
    paired = [f"{a} {b}" for a in texts[:20] for b in texts[20:40]]
    return (texts + paired)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()

    from sqlalchemy import create_engine, text

    from stormbuffer.embedding import acquire_model, load_embedder
    from stormbuffer.engines.postgresql import tables
    from stormbuffer.engines.postgresql.projecting import ensure_vector_index, project

    version = version_seconds()
    work = Path(tempfile.mkdtemp(prefix="sbuf-hnsw-"))
    print("acquiring the model …", file=sys.stderr)
    acquire_model(work / "models")
    embedder = load_embedder(work / "models")
    server = PostgresServer.start()
    try:
        url = server.create_database().replace("postgresql://", "postgresql+psycopg://", 1)
        engine = create_engine(url)
        scope = "project:00000000-0000-4000-8000-000000000001"
        with engine.begin() as conn:
            tables.create(conn, embedder.dimension)
        started = time.perf_counter()
        for first in range(0, args.records, BATCH):
            records = [make_record(index, scope) for index in range(first, min(args.records, first + BATCH))]
            with engine.begin() as conn:
                project(conn, scope, [(f"records/{record.id}.md", record) for record in records],
                        dimension=embedder.dimension, count_tokens=embedder.token_count, embedder=embedder)  # fmt: skip
            print(f"projected {first + len(records)} of {args.records} records", file=sys.stderr)
        projected = time.perf_counter() - started
        started = time.perf_counter()
        with engine.begin() as conn:
            ensure_vector_index(conn, at_least=1)
        indexed = time.perf_counter() - started
        queries = query_texts(args.queries)
        vectors = embedder.embed(queries)
        nearest = "SELECT id FROM stormbuffer.projection_chunks WHERE embedding IS NOT NULL ORDER BY embedding <=> :q"
        recall: dict[int, list[float]] = {ef: [] for ef in EF_SEARCH}
        timings: dict[str, list[float]] = {"exact": [], **{f"hnsw_ef{ef}": [] for ef in EF_SEARCH}}
        with engine.connect() as conn:
            counted = text(
                "SELECT (SELECT count(*) FROM stormbuffer.projection_chunks WHERE embedding IS NOT NULL), "
                "pg_database_size(current_database())"
            )
            chunks, size = conn.execute(counted).one()
            for vector in vectors:
                q = "[" + ",".join(f"{value:.8f}" for value in vector) + "]"
                start = time.perf_counter()
                exact = [row[0] for row in conn.execute(text(f"{nearest}, id LIMIT 10"), {"q": q})]
                timings["exact"].append(time.perf_counter() - start)
                conn.execute(text("SET enable_seqscan = off"))  # a small table would be scanned: measure the index
                for ef in EF_SEARCH:
                    conn.execute(text(f"SET hnsw.ef_search = {ef}"))
                    start = time.perf_counter()
                    found = [row[0] for row in conn.execute(text(f"{nearest} LIMIT 10"), {"q": q})]
                    timings[f"hnsw_ef{ef}"].append(time.perf_counter() - start)
                    recall[ef].append(len(set(found) & set(exact)) / len(exact))
                conn.execute(text("RESET enable_seqscan"))
            conn.execute(text("SET enable_seqscan = off"))
            plan = " ".join(row[0] for row in conn.execute(text(f"EXPLAIN {nearest} LIMIT 10"), {"q": q}))
        engine.dispose()
    finally:
        server.stop()
    results = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "records": args.records, "vectors": int(chunks), "queries": len(queries),
        "model": f"{embedder.model_id} {embedder.model_version} (real vectors)",
        "index": "hnsw vector_cosine_ops m=16 ef_construction=64", "index_used": "hnsw" in plan,
        "recall_at_10": {f"ef_search={ef}": round(statistics.mean(values), 4) for ef, values in recall.items()},
        "p50_ms": {name: round(1000 * statistics.median(values), 2) for name, values in timings.items()},
        "project_s": round(projected, 1), "index_build_s": round(indexed, 2), "database_mb": round(size / 2**20, 1),
        "sbuf_version_s": round(version, 3), "load_average": list(os.getloadavg()),
    }  # fmt: skip
    print(json.dumps(results, indent=2))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""HNSW recall@10 against exact search for several index settings (m, ef_construction, ef_search).

Starts a real PostgreSQL with pgvector (`tests/postgres.py`) and fills one table with `--vectors`
vectors of one of two sources:

- `--source real`: the real model's vectors of real text, store chunks of LongMemEval-S turns and
  SciFact abstracts, with held-out LongMemEval-S questions and SciFact claims as queries, embedded
  once by bench/real_vectors.py and read from its cache;
- `--source mixes` (the default): the benchmark corpus's paragraphs (bench/corpus.py), each a
  `WeightedMixes` vector of bench/pg_scale.py (a unit mix of three of `--sample` real-model vectors,
  chosen and weighted by a hash of the text: labelled, not the model's own vectors), with the corpus
  queries embedded by the real model.

The exact 10 of each query are ordered by distance (then id); a row found through the index whose
distance is at most the exact 10th distance counts as a hit, so ties at the 10th distance are hits.
For each `--settings` m/ef_construction it builds the index (timed), then, with sequential scans
off and `hnsw.iterative_scan = relaxed_order` as the store's reader sets it, at each `--ef-search`:
`limit10` asks the index for 10 rows; `reranked` asks it for ef_search rows and keeps the 10 nearest
of them, which is what the reader does (it asks for four times the records wanted with ef_search set
to that number: 40 for 10 records, 200 at a hybrid recall's depth). Reports recall@10 and the median
query time of each, with `sbuf --version` timed in the same run. Saves
bench/results/hnsw_settings-real-VECTORS.json or hnsw_settings-VECTORS-SAMPLE.json.

Usage: python bench/hnsw_settings.py [--source mixes|real] [--vectors 100000] [--sample 2048]
       [--settings 16/64,32/128] [--ef-search 40,100,200,400] [--seconds 540]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
from corpus import make_record  # noqa: E402
from hnsw_recall import query_texts, version_seconds  # noqa: E402
from machine import save  # noqa: E402
from pg_scale import WeightedMixes, heartbeat, say  # noqa: E402

from tests.postgres import PostgresServer  # noqa: E402

if TYPE_CHECKING:
    import numpy as np


def paragraphs(count: int) -> list[str]:
    found: list[str] = []
    index = 0
    while len(found) < count:
        found += [part for part in make_record(index, "project:x").body.split("\n\n") if part.strip()]
        index += 1
    return found[:count]


def mixed_vectors(count: int, sample: int, queries: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Mixes of `sample` real-model vectors of the templated corpus, and its queries embedded by the model."""
    from stormbuffer.embedding import acquire_model, load_embedder

    work = Path(tempfile.mkdtemp(prefix="sbuf-hnsw-settings-"))
    try:
        acquire_model(work)
        real = load_embedder(work)
        picked = real.embed([make_record(index, "project:x").body[:400] for index in range(sample)])
        vectors = WeightedMixes(real, picked).embed(paragraphs(count))
        return vectors, real.embed(query_texts(queries)), (
            f"unit mixes of three of {sample} real-model vectors (hash-chosen and weighted) per paragraph of the "
            "templated corpus (labelled); queries embedded by the real model")  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


def real_vectors(count: int, queries: int) -> tuple[np.ndarray, np.ndarray, str]:
    """The real model's cached vectors of real text (bench/real_vectors.py) and its held-out queries."""
    from real_vectors import load

    vectors, asked, manifest = load(count)
    return vectors, asked[:queries], (
        f"{manifest['vectors_are']}; model {manifest['model_id']} {manifest['model_version']}; queries: "
        "held-out LongMemEval-S questions and SciFact test claims embedded by the same model")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=("mixes", "real"), default="mixes")
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--sample", type=int, default=2048, help="real vectors the mixes are made of")
    parser.add_argument("--settings", default="16/64,32/128", help="m/ef_construction pairs")
    parser.add_argument("--ef-search", default="40,100,200,400")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=540, help="start no new measurement after this long")
    args = parser.parse_args()

    import psycopg

    started_run = time.monotonic()
    version = version_seconds()
    if args.source == "real":
        vectors, queries, vectors_are = real_vectors(args.vectors, args.queries)
    else:
        vectors, queries, vectors_are = mixed_vectors(args.vectors, args.sample, args.queries)
    asked = [str(query) for query in queries.tolist()]
    results: list[dict[str, Any]] = []
    measured: dict[str, Any] = {}
    server = PostgresServer.start()
    try:
        with psycopg.connect(server.create_database(), autocommit=True) as conn:
            conn.execute(f"CREATE TABLE t (id bigint PRIMARY KEY, e vector({vectors.shape[1]}))")
            started = time.perf_counter()
            with conn.cursor().copy("COPY t (id, e) FROM STDIN") as copy:
                for number, vector in enumerate(vectors.tolist()):
                    copy.write(f"{number}\t{vector}\n")
            conn.execute("VACUUM ANALYZE t")
            measured["load_s"] = round(time.perf_counter() - started, 1)
            say(f"loaded {len(vectors)} vectors ({vectors_are.split(';')[0]})")
            nearest = "SELECT id, e <=> %s::vector AS d FROM t ORDER BY d"
            exact, times = [], []
            for query in asked:
                started = time.perf_counter()
                exact.append([row[1] for row in conn.execute(f"{nearest}, id LIMIT 10", (query,))][-1])
                times.append(time.perf_counter() - started)
            measured["exact_p50_ms"] = round(1000 * statistics.median(times), 2)
            say(f"exact 10 of {len(asked)} queries, p50 {measured['exact_p50_ms']} ms")
            conn.execute("SET maintenance_work_mem = '2GB'")
            conn.execute("SET max_parallel_maintenance_workers = 1")
            for setting in args.settings.split(","):
                m, ef_construction = (int(part) for part in setting.split("/"))
                if time.monotonic() - started_run > args.seconds:
                    say(f"stopped before m={m}/ef_construction={ef_construction}: over {args.seconds:.0f} s")
                    break
                conn.execute("DROP INDEX IF EXISTS t_hnsw")
                started = time.perf_counter()
                with heartbeat(f"HNSW build m={m} ef_construction={ef_construction}"):
                    conn.execute(f"CREATE INDEX t_hnsw ON t USING hnsw (e vector_cosine_ops) WITH (m = {m}, "
                                 f"ef_construction = {ef_construction})")  # fmt: skip
                built = time.perf_counter() - started
                size = conn.execute("SELECT pg_relation_size('t_hnsw')").fetchone()[0]  # type: ignore[index]
                conn.execute("SET enable_seqscan = off")
                conn.execute("SET hnsw.iterative_scan = relaxed_order")
                for ef in (int(part) for part in args.ef_search.split(",")):
                    conn.execute(f"SET hnsw.ef_search = {ef}")
                    row: dict[str, Any] = {"m": m, "ef_construction": ef_construction, "build_s": round(built, 1),
                                           "index_mb": round(size / 2**20, 1), "ef_search": ef}  # fmt: skip
                    for name, limit in (("limit10", 10), ("reranked", ef)):
                        shares, times = [], []
                        for query, tenth in zip(asked, exact, strict=True):
                            started = time.perf_counter()
                            found = sorted(row[1] for row in conn.execute(f"{nearest} LIMIT {limit}", (query,)))
                            times.append(time.perf_counter() - started)
                            shares.append(sum(distance <= tenth for distance in found[:10]) / 10)
                        row[f"{name}_recall_at_10"] = round(statistics.mean(shares), 4)
                        row[f"{name}_p50_ms"] = round(1000 * statistics.median(times), 2)
                    results.append(row)
                    say(str(row))
                conn.execute("RESET enable_seqscan")
    finally:
        server.stop()
    name = f"hnsw_settings-real-{args.vectors}.json" if args.source == "real" else \
        f"hnsw_settings-{args.vectors}-{args.sample}.json"  # fmt: skip
    save(ROOT / "bench" / "results" / name, {
        "vectors": args.vectors, "queries": len(asked), "vectors_are": vectors_are,
        "exact": "ordered by distance then id; an index row at most the exact 10th distance away is a hit (ties count)",
        "reader_settings": "hnsw.iterative_scan = relaxed_order; reranked = ef_search rows asked for, the 10 nearest "
                           "kept (the reader: ef_search 40 for 10 records, 200 at a hybrid recall's depth)",
        **measured, "results": results, "sbuf_version_s": round(version, 3)})  # fmt: skip


if __name__ == "__main__":
    main()

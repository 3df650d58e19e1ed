"""Warm recall through the memory daemon on both engines, the way an agent's MCP client sees it.

Two project stores hold the same `--records` records of the benchmark corpus (bench/corpus.py): a
directory store (SQLite projection) and a PostgreSQL store on a real server with pgvector (the test
server of `tests/postgres.py`, on a loopback port with a password, named by STORMBUFFER_DATABASE_URL).
Each store gets one `stormbuffer-mcp --stdio --project` session relayed to its own daemon, and the
same queries go to both as `memory_recall` (hybrid, budget 512), alternated query by query, so a
busy machine slows both alike. The daemons embed every query with the real model. Record vectors:
unit mixes of two of `--sample` real-model vectors per text, chosen by a hash of the text (labelled
in the results: recall quality is meaningless, the per-query work is identical); both stores get
the same vectors. At 10,000 records the PostgreSQL store is past `HNSW_FROM` and searches through
its HNSW index, as any recall at that size does.

Also reported: both builds (the directory store's sync; the PostgreSQL store's bulk write of the
records with their projection, then its vectors and its HNSW index, stage by stage as bench/pg_build.py
times them; then, timed apart, the `VACUUM
(ANALYZE)` autovacuum runs some time after a load, without which the postings' index-only scans also
read their table and a run would measure how soon autovacuum came), `sbuf --version` timed in the
same run, the load average before and after (the machine may be shared), and how many queries
brought the same record ids in the same order from both. Saves bench/results/engines_daemon.json
(engines_daemon-LABEL.json with --label: run the previous version with `PYTHONPATH=<a copy of its
src>`, which the daemons inherit, for a paired comparison).

Usage: python bench/engines_daemon.py [--records 10000] [--queries 200] [--warmup 20] [--label NAME]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
from corpus import write_store  # noqa: E402
from daemon import Session  # noqa: E402
from engines import MixedVectors, save  # noqa: E402
from hnsw_recall import query_texts, version_seconds  # noqa: E402
from invoke_latency import environment  # noqa: E402
from machine import machine  # noqa: E402
from pg_build import build_postgresql  # noqa: E402

from tests.postgres import PostgresServer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "engines_daemon.json"
URL_VARIABLE = "STORMBUFFER_DATABASE_URL"


def daemon_environment(home: Path, url: str | None = None) -> dict[str, str]:
    """The store's home and caches, with the daemon on (and the database URL for a PostgreSQL store)."""
    env = environment(home, "cache")
    env.pop("STORMBUFFER_NO_DAEMON")
    if url is not None:
        env[URL_VARIABLE] = url
    return env


def recalled(session: Session, query: str) -> tuple[float, list[str]]:
    """Seconds of one warm `memory_recall` and the record ids of its items, in order."""
    began = time.perf_counter()
    answer = session.call("tools/call", {"name": "memory_recall", "arguments": {"query": query, "budget": 512}})
    elapsed = time.perf_counter() - began
    envelope = answer["result"]["structuredContent"]
    assert envelope["ok"] and envelope["result"]["receipt"]["retrieval_mode"] == "hybrid", envelope
    return elapsed, [block["record_id"] for block in envelope["result"]["blocks"]]


def build_directory(home: Path, records: int, sample: int) -> tuple[Any, Any, float]:
    """The directory store (records, projection, vectors); returns its paths, the embedder and the sync's seconds."""
    from stormbuffer.core.stores import PlatformDirs, View, initialize_store, record_scope, resolve_store
    from stormbuffer.embedding import acquire_model, load_embedder
    from stormbuffer.index.sync import sync_store

    (home / "project").mkdir(parents=True)
    paths = resolve_store(View.PROJECT, home / "project", PlatformDirs(home / "data", home / "cache"))
    initialize_store(paths)
    print(f"writing {records} records …", file=sys.stderr)
    write_store(paths.records, record_scope(paths), records)
    acquire_model(paths.cache_dir)
    real = load_embedder(paths.cache_dir)
    texts = [path.read_text(encoding="utf-8").split("+++", 2)[2][:400] for path in sorted(paths.records.iterdir())]
    embedder = MixedVectors(real, real.embed(texts[:sample]))
    print("syncing the directory store …", file=sys.stderr)
    started = time.perf_counter()
    sync_store(paths, embedder)
    return paths, embedder, time.perf_counter() - started


def vacuumed(url: str) -> float:
    """VACUUM (ANALYZE) the projection's tables, as autovacuum does some time after a load (until then
    index-only scans of the postings still read their table's pages); returns the seconds it took."""
    import psycopg

    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) stormbuffer.projection_records, stormbuffer.projection_chunks, "
                     "stormbuffer.projection_postings")  # fmt: skip
    return time.perf_counter() - started


def postgresql_copy(
    work: Path, server: PostgresServer, directory: Any, embedder: Any
) -> tuple[dict[str, str], dict[str, Any], float]:
    """The directory store's records in a new PostgreSQL store at `work / "postgresql"` (a new database of
    `server`), built as `sbuf import` and `sbuf sync` build one, then vacuumed: its daemon environment,
    the build's stages (`build_postgresql`) and the seconds of the vacuum."""
    database = server.create_database().split("@/", 1)[1].split("?", 1)[0]
    env = daemon_environment(work / "postgresql", server.tcp_url(database))
    built = build_postgresql(work / "postgresql", env, directory, embedder)
    return env, built, vacuumed(env[URL_VARIABLE])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20, help="recalls per session before timing")
    parser.add_argument("--sample", type=int, default=256)
    parser.add_argument("--label", help="save to bench/results/engines_daemon-LABEL.json (paired runs of two versions)")
    args = parser.parse_args()

    from stormbuffer.daemon import relay

    load_before = [round(value, 2) for value in os.getloadavg()]
    work = Path(tempfile.mkdtemp(prefix="sbuf-engines-daemon-"))
    directory, embedder, directory_build = build_directory(work / "directory", args.records, args.sample)
    server = PostgresServer.start()
    envs = {"directory": daemon_environment(work / "directory")}
    sessions: dict[str, Session] = {}
    try:
        envs["postgresql"], built, vacuum = postgresql_copy(work, server, directory, embedder)
        postgresql_build, indexed = built["seconds"]["total"], built["hnsw_index"]
        version = version_seconds()
        queries = query_texts(args.queries)
        for name, env in envs.items():
            sessions[name] = Session(work / name / "project", env)
            sessions[name].open()
            for query in queries[: args.warmup]:
                recalled(sessions[name], query)
        print(f"timing {len(queries)} recalls on each engine, alternated …", file=sys.stderr)
        times: dict[str, list[float]] = {name: [] for name in sessions}
        same = 0
        for done, query in enumerate(queries, 1):
            answers = {}
            for name, session in sessions.items():
                seconds, answers[name] = recalled(session, query)
                times[name].append(seconds)
            same += answers["directory"] == answers["postgresql"]
            if done % 50 == 0:
                print(f"{done} of {len(queries)} queries", file=sys.stderr)
    finally:
        for name, session in sessions.items():
            session.close()
            relay.stop(envs[name])
        server.stop()
    p50 = {name: round(1000 * statistics.median(values), 2) for name, values in times.items()}
    results = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "path": "memory_recall (hybrid, budget 512) over stormbuffer-mcp --stdio, relayed to each store's daemon",
        "records": args.records, "queries": len(queries), "hnsw_index": indexed,
        "query_vectors": "the real model, in the daemon",
        "record_vectors": f"unit mixes of two of {args.sample} real-model vectors per text (labelled: "
                          "recall meaningless)",
        "warm_recall_p50_ms": p50,
        "warm_recall_p95_ms": {name: round(1000 * sorted(values)[int(0.95 * (len(values) - 1))], 2)
                               for name, values in times.items()},
        "postgresql_over_directory": round(p50["postgresql"] / p50["directory"], 2),
        "same_record_order": same,
        "build_s": {"directory": round(directory_build, 1), "postgresql": round(postgresql_build, 1)},
        "build_postgresql_over_directory": round(postgresql_build / directory_build, 2),
        "build_postgresql_stages_s": built["seconds"],
        "postgresql_vacuum_after_build_s": round(vacuum, 1),
        "sbuf_version_s": round(version, 3),
        "directory_over_version": round(p50["directory"] / 1000 / version, 2),
        "load_average_before": load_before, "machine": machine(),
    }  # fmt: skip
    save(results, RESULTS, args.label)


if __name__ == "__main__":
    main()

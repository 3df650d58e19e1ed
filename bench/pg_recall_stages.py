"""Where a warm recall's time goes on each engine, stage by stage, in one process as the daemon runs it.

Builds the same two stores as bench/engines_daemon.py (`--records` corpus records, record vectors mixed
from real-model vectors and labelled so; a directory store and a PostgreSQL store on the test server of
`tests/postgres.py`, vacuumed after its load), then runs `protocol.reads.context` (what `memory_recall`
runs in the daemon: hybrid, budget 512) on both, alternated query by query, in this one warm process.
Every query is embedded by the real model (the recent-query cache is off, as for new queries). Probes
around the retrieval and reader functions stamp when each stage starts and ends, from the request's
start; the medians of those stamps draw a recall's timeline, which shows what waits on what (the
query's embedding on its worker thread, the lexical side on the request's thread, each database round
trip). Also: the same-answer count, the load average and `sbuf --version` timed in the same run.
Saves bench/results/pg_recall_stages.json (pg_recall_stages-LABEL.json with --label; run an earlier
version with `PYTHONPATH=<a copy of its src>` for a paired comparison).

Usage: python bench/pg_recall_stages.py [--records 10000] [--queries 200] [--label NAME]
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
from engines import save  # noqa: E402
from engines_daemon import URL_VARIABLE, build_directory, postgresql_copy  # noqa: E402
from hnsw_recall import query_texts, version_seconds  # noqa: E402
from machine import machine  # noqa: E402

from tests.postgres import PostgresServer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "pg_recall_stages.json"
WARMUP = 20


class Timeline:
    """When probed functions start and end, in seconds from the current request's start (first call each)."""

    def __init__(self) -> None:
        self.started = 0.0
        self.current: dict[str, tuple[float, float]] = {}

    def probe(self, owner: Any, attribute: str, name: str) -> None:
        """Stamp every call of `owner.attribute` (absent in other versions of the code: skipped)."""
        original: Callable[..., Any] | None = getattr(owner, attribute, None)
        if original is None:
            return

        def probed(*args: Any, **kwargs: Any) -> Any:
            begun = time.perf_counter() - self.started
            try:
                return original(*args, **kwargs)
            finally:
                self.current.setdefault(name, (begun, time.perf_counter() - self.started))

        setattr(owner, attribute, probed)


def probes(timeline: Timeline) -> None:
    from stormbuffer.engines.postgresql import projection
    from stormbuffer.protocol import reads

    search = importlib.import_module("stormbuffer.retrieval.search")
    for owner, attribute, name in [
        (reads, "prepare_retrieval", "prepare (vectors waiting?)"),
        (search, "_embed_query", "query embedding"),
        (projection, "_connected", "opening"),
        (search, "lexical_hits", "lexical side"),
        (projection.PostgresTerms, "own", "postings statement"),
        (projection.PostgresProjection, "chunk_rows", "candidates' rows"),
        (projection.Beside, "rows", "vector search statement"),
        (search, "similar_hits", "candidates weighed"),
        (search, "vector_hits", "nearest rows' hits"),
        (search, "fuse", "fusion"),
    ]:
        timeline.probe(owner, attribute, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--sample", type=int, default=256)
    parser.add_argument("--label", help="save to bench/results/pg_recall_stages-LABEL.json")
    args = parser.parse_args()

    from stormbuffer.adapters.mcp.warm import WarmEmbedder
    from stormbuffer.core.stores import PlatformDirs, View, resolve_store
    from stormbuffer.index.freshness import FreshnessRegistry
    from stormbuffer.protocol import reads
    from stormbuffer.protocol.session import Session
    from stormbuffer.retrieval.query_vectors import QueryVectors

    load_before = [round(value, 2) for value in os.getloadavg()]
    work = Path(tempfile.mkdtemp(prefix="sbuf-pg-recall-stages-"))
    directory_paths, embedder, _seconds = build_directory(work / "directory", args.records, args.sample)
    server = PostgresServer.start()
    registry = FreshnessRegistry()
    try:
        env, _built, _vacuum = postgresql_copy(work, server, directory_paths, embedder)  # the same records, vectors
        os.environ[URL_VARIABLE] = env[URL_VARIABLE]
        version = version_seconds()
        search = importlib.import_module("stormbuffer.retrieval.search")
        search._RECENT = QueryVectors(0)  # every recall embeds its query
        model = WarmEmbedder(directory_paths.cache_dir)
        sessions = {}
        for name in ("directory", "postgresql"):
            dirs = PlatformDirs(work / name / "data", work / name / "cache")
            paths = resolve_store(View.PROJECT, work / name / "project", dirs)
            sessions[name] = Session(View.PROJECT, paths, dirs, model, registry)
        queries = query_texts(args.queries)

        def recall(session: Session, query: str) -> list[str]:
            answer = reads.context({"query": query, "budget": 512}, session)
            return [block["record_id"] for block in answer["blocks"]]

        for query in queries[:WARMUP]:
            for session in sessions.values():
                recall(session, query)
        timeline = Timeline()
        probes(timeline)
        stamps: dict[str, dict[str, list[tuple[float, float]]]] = {name: defaultdict(list) for name in sessions}
        same = 0
        print(f"timing {len(queries)} recalls on each engine, alternated …", file=sys.stderr)
        for query in queries:
            answers = {}
            for name, session in sessions.items():
                timeline.current = {}
                timeline.started = time.perf_counter()
                answers[name] = recall(session, query)
                stamps[name]["whole recall"].append((0.0, time.perf_counter() - timeline.started))
                for stage, stamp in timeline.current.items():
                    stamps[name][stage].append(stamp)
            same += answers["directory"] == answers["postgresql"]
    finally:
        registry.close()
        server.stop()

    def ms(values: list[float]) -> float:
        return round(1000 * statistics.median(values), 2)

    timelines = {name: {stage: {"start_ms": ms([a for a, _b in found]), "end_ms": ms([b for _a, b in found]),
                                "duration_ms": ms([b - a for a, b in found]), "calls": len(found)}
                        for stage, found in sorted(stages.items(), key=lambda item: statistics.median(
                            a for a, _b in item[1]))}
                 for name, stages in stamps.items()}  # fmt: skip
    p50 = {name: timelines[name]["whole recall"]["end_ms"] for name in timelines}
    results = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "path": "protocol.reads.context (hybrid, budget 512) in one warm process, as the daemon runs it",
        "records": args.records, "queries": len(queries),
        "record_vectors": f"unit mixes of two of {args.sample} real-model vectors per text (labelled: "
                          "recall meaningless)",
        "timeline_ms": timelines, "warm_recall_p50_ms": p50,
        "postgresql_over_directory": round(p50["postgresql"] / p50["directory"], 2),
        "same_record_order": same, "sbuf_version_s": round(version, 3),
        "load_average_before": load_before, "load_average_after": [round(value, 2) for value in os.getloadavg()],
        "machine": machine(),
    }  # fmt: skip
    for name, stages in timelines.items():
        print(name)
        for stage, found in stages.items():
            print(f"  {stage:28s} {found['start_ms']:7.2f} → {found['end_ms']:7.2f} ms ({found['duration_ms']:.2f})")
    save(results, RESULTS, args.label)


if __name__ == "__main__":
    main()

"""Both engines in one run: the same records in a directory store (SQLite projection) and in the
PostgreSQL projection, the same queries, the same answers?

Writes `--records` records of the benchmark corpus (bench/corpus.py) into a directory store and
syncs it; projects the same records, in the same order, into a real PostgreSQL with pgvector (the
test server of `tests/postgres.py`) through the projection's write path. Vectors: the real model
embeds `--sample` corpus chunks; every other text gets a unit mix of two of those real vectors
chosen by a hash of the text (labelled below; the per-query work is identical, recall is
meaningless). Both engines get exactly the same vectors, so exact vector search must agree.

Then for `--queries` queries (corpus queries and phrases) in hybrid mode with exact vector search:
the share whose record ids come back in the same order from both engines (the rest are listed with
whether they differ only among equal scores), and the warm recall p50 of each engine in this process,
beside `sbuf --version` timed in the same run; past `HNSW_FROM` vectors also PostgreSQL's p50 through its
HNSW index, the path a recall takes at that size (answers are compared on exact search only). Each query
runs on every engine in turn, so a busy machine slows all alike. Saves bench/results/engines.json
(engines-LABEL.json with --label, for paired runs of two versions of the code).

Usage: python bench/engines.py [--records 2000] [--queries 200] [--label NAME]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
from corpus import write_store  # noqa: E402
from hnsw_recall import query_texts, version_seconds  # noqa: E402
from scale import ReusedVectors  # noqa: E402

from tests.postgres import PostgresServer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "engines.json"
SCOPE_FILE = "store.toml"


class MixedVectors(ReusedVectors):
    """The real model's identity and tokenizer; each text's vector a unit mix of two real vectors of a
    sample, chosen by a hash of the text."""

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = []
        for text in texts:
            digest = hashlib.sha256(text.encode()).digest()
            first, second = (int.from_bytes(digest[at : at + 4], "little") % len(self._sample) for at in (0, 4))
            mixed = self._sample[first] + 0.5 * self._sample[second]
            rows.append(mixed / np.linalg.norm(mixed))
        return np.asarray(rows, dtype="<f4").reshape(len(texts), self.dimension)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--sample", type=int, default=256)
    parser.add_argument("--label", help="save to bench/results/engines-LABEL.json (paired runs of two versions)")
    args = parser.parse_args()

    from sqlalchemy import create_engine

    from stormbuffer.core.codec import parse_markdown
    from stormbuffer.core.stores import PlatformDirs, View, initialize_store, record_scope, resolve_store
    from stormbuffer.embedding import acquire_model, load_embedder
    from stormbuffer.engines import projection as engine_projection
    from stormbuffer.engines.postgresql import projection as pg
    from stormbuffer.engines.postgresql import tables
    from stormbuffer.engines.postgresql.projecting import ensure_vector_index, project, refresh_statistics
    from stormbuffer.index import projection as pj
    from stormbuffer.index.sync import sync_store
    from stormbuffer.retrieval.hits import SearchOptions
    from stormbuffer.retrieval.search import effective_options, rank_projections

    version = version_seconds()
    work = Path(tempfile.mkdtemp(prefix="sbuf-engines-"))
    (work / "project").mkdir()
    paths = resolve_store(View.PROJECT, work / "project", PlatformDirs(work / "data", work / "cache"))
    initialize_store(paths)
    scope = record_scope(paths)
    print(f"writing {args.records} records …", file=sys.stderr)
    write_store(paths.records, scope, args.records)
    acquire_model(work / "models")
    real = load_embedder(work / "models")
    texts = [path.read_text(encoding="utf-8").split("+++", 2)[2][:400] for path in sorted(paths.records.iterdir())]
    sample = real.embed(texts[: args.sample])
    embedder = MixedVectors(real, sample)
    print("syncing the directory store …", file=sys.stderr)
    started = time.perf_counter()
    sync_store(paths, embedder)
    sqlite_build = time.perf_counter() - started
    index = pj.existing_index_path(paths)
    assert index is not None
    with pj.reading(index) as conn:
        order = [path for (path,) in conn.execute("SELECT r.path FROM chunks AS c JOIN records AS r ON "
                                                  "r.id = c.record_id GROUP BY r.path ORDER BY min(c.id)")]  # fmt: skip
    server = PostgresServer.start()
    try:
        engine = create_engine(server.create_database().replace("postgresql://", "postgresql+psycopg://", 1))
        with engine.begin() as conn:
            tables.create(conn, embedder.dimension)
        started = time.perf_counter()
        for first in range(0, len(order), 200):
            items = [(path, parse_markdown((paths.root / path).read_bytes())) for path in order[first : first + 200]]
            with engine.begin() as conn:
                project(conn, scope, items, dimension=embedder.dimension, count_tokens=embedder.token_count,
                        embedder=embedder)  # fmt: skip
            print(f"projected {first + len(items)} of {len(order)} records into PostgreSQL", file=sys.stderr)
        with engine.begin() as conn:
            refresh_statistics(conn, embedder.dimension)  # as a bulk import does
        postgres_build = time.perf_counter() - started
        with engine.begin() as conn:  # as the first read after a load does, past HNSW_FROM vectors
            indexed = ensure_vector_index(conn)
        queries = query_texts(args.queries)
        options = effective_options([paths], SearchOptions(limit=10, mode="hybrid"))
        reading = partial(pg.reading, engine, scope, paths.root)
        openers = {"directory": partial(engine_projection.reading, paths), "postgresql": partial(reading, exact=True)}
        if indexed:  # what a recall does at this size: through the HNSW index (timed only: answers are exact's)
            openers["postgresql_hnsw"] = reading
        answers: dict[str, list[list[tuple[str, float]]]] = {name: [] for name in openers}
        times: dict[str, list[float]] = {name: [] for name in openers}
        for round_ in range(2):  # the first round warms all; the second is timed, engines interleaved per query
            for query in queries:
                for name, opener in openers.items():
                    start = time.perf_counter()
                    ranking = rank_projections([opener], query, options, embedder=embedder)
                    if round_:
                        times[name].append(time.perf_counter() - start)
                        answers[name].append([(hit.record_id, hit.score) for hit in ranking.hits])
        engine.dispose()
    finally:
        server.stop()
    same, tied, differ = 0, 0, []
    for query, ours, theirs in zip(queries, answers["postgresql"], answers["directory"], strict=True):
        if [record for record, _ in ours] == [record for record, _ in theirs]:
            same += 1
        elif len(ours) == len(theirs) and all(a[0] == b[0] or abs(a[1] - b[1]) < 1e-5
                                              for a, b in zip(ours, theirs, strict=True)):  # fmt: skip
            tied += 1  # where the records differ, their scores are equal
        else:
            differ.append(query)
    results = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "records": args.records, "queries": len(queries), "mode": "hybrid, exact vector search",
        "vectors": f"unit mixes of two of {args.sample} real-model vectors per text (labelled: recall meaningless)",
        "same_order": same, "same_order_share": round(same / len(queries), 4), "differ_only_among_ties": tied,
        "differ": differ[:10],
        "warm_recall_p50_ms": {name: round(1000 * statistics.median(values), 2) for name, values in times.items()},
        "build_s": {"directory": round(sqlite_build, 1), "postgresql": round(postgres_build, 1)},
        "hnsw_index": indexed,
        "sbuf_version_s": round(version, 3), "load_average": list(os.getloadavg()),
    }  # fmt: skip
    p50 = results["warm_recall_p50_ms"]
    results["postgresql_over_directory"] = round(p50["postgresql"] / p50["directory"], 2)
    if "postgresql_hnsw" in p50:
        results["postgresql_hnsw_over_directory"] = round(p50["postgresql_hnsw"] / p50["directory"], 2)
    results["directory_over_version"] = round(p50["directory"] / 1000 / version, 2)
    results["build_postgresql_over_directory"] = round(postgres_build / sqlite_build, 2)
    save(results, RESULTS, args.label)


def save(results: dict[str, object], path: Path, label: str | None) -> None:
    """Print the results and save them to `path`, or beside it as NAME-LABEL.json with a label."""
    print(json.dumps(results, indent=2))
    saved = path.with_name(f"{path.stem}-{label}.json") if label else path
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

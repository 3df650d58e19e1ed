"""Index build of both engines, stage by stage: where a PostgreSQL store's build time goes.

The same records go into a directory store (timed: one `sync_store`, its embedding apart) and into a
PostgreSQL store on a real server with pgvector (the test server of `tests/postgres.py`), the way
`sbuf import` and `sbuf sync` build one: every record row and its projection in one bulk write
(`write_all`: the record rows, the projection's chunks and postings, ANALYZE), then the vectors
(`index.backlog.catch_up`, as `sbuf sync` does), then the HNSW index when the store is past
`HNSW_FROM`. Each stage's seconds are reported, the embedder's share of each engine apart.

Records: `--source corpus` (default) writes `--records` records of the benchmark corpus
(bench/corpus.py) with record vectors from `MixedVectors` (unit mixes of `--sample` real-model
vectors, chosen by a hash of the text: cheap, labelled); `--source longmemeval` writes `--turns`
LongMemEval-S turns (from ../shared/bench, `--data` overrides) as bench/load_rate.py does and embeds
them with the real model (chunk and sentence vectors), so the embedder's work is real.

`sbuf --version` is timed in the same run, the load average before and after each build. Saves
bench/results/pg_build[-SOURCE].json (pg_build-LABEL.json with --label, for paired runs of two versions
of the code: run the previous one with `PYTHONPATH=<a copy of its src>`).

Usage: python bench/pg_build.py [--source corpus|longmemeval] [--records 10000] [--turns 981] [--label NAME]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
from corpus import write_store  # noqa: E402
from engines import MixedVectors, save  # noqa: E402
from hnsw_recall import version_seconds  # noqa: E402
from invoke_latency import environment  # noqa: E402
from machine import machine  # noqa: E402
from shared_data import DEFAULT as DEFAULT_DATA  # noqa: E402

from tests.postgres import PostgresServer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "pg_build.json"
SBUF = Path(sys.executable).parent / "sbuf"
URL_VARIABLE = "STORMBUFFER_DATABASE_URL"


class Stopwatch:
    """Seconds spent inside chosen functions while `timing` is on, summed by name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def timing(self, targets: dict[str, tuple[Any, str]]) -> Iterator[None]:
        """Wrap each `name → (owner, attribute)` for the block, then put the originals back."""
        originals = {name: getattr(owner, attribute) for name, (owner, attribute) in targets.items()}
        for name, (owner, attribute) in targets.items():
            setattr(owner, attribute, self._timed(name, originals[name]))
        try:
            yield
        finally:
            for name, (owner, attribute) in targets.items():
                setattr(owner, attribute, originals[name])

    def _timed(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - started

        return timed

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started

    def rounded(self) -> dict[str, float]:
        return {name: round(value, 2) for name, value in self.seconds.items()}


def load() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def build_directory(paths: Any, embedder: Any) -> dict[str, Any]:
    """`sync_store` of the directory store at `paths`, with the embedder's seconds apart."""
    from stormbuffer.index import sync

    watch, before = Stopwatch(), load()
    with watch.timing({"embedding": (sync, "_chunk_vectors")}), watch.stage("total"):
        report = sync.sync_store(paths, embedder)
    return {"seconds": watch.rounded(), "chunks": report.chunks, "embedded": report.embedded,
            "load_average": [before, load()]}  # fmt: skip


def build_postgresql(home: Path, env: dict[str, str], directory: Any, embedder: Any) -> dict[str, Any]:
    """The PostgreSQL store at `home`: the directory store's records (in its scope, in the order of the
    directory store's chunk ids, so ties break alike) written in one bulk write as `sbuf import` does,
    their vectors embedded as `sbuf sync` does, then the HNSW index (when past `HNSW_FROM`). Returns
    each stage's seconds and whether the index exists."""
    from stormbuffer.core.codec import parse_markdown, render_markdown
    from stormbuffer.core.staging import FileWrite
    from stormbuffer.core.stores import PlatformDirs, View, read_config, record_scope, resolve_store
    from stormbuffer.engines import open_record_store
    from stormbuffer.engines.postgresql import projecting, store
    from stormbuffer.engines.postgresql.database import connection
    from stormbuffer.index import projection as pj
    from stormbuffer.index.backlog import catch_up

    (home / "project").mkdir(parents=True)
    done = subprocess.run([str(SBUF), "--project", "init", "--engine", "postgresql"], cwd=home / "project", env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    if done.returncode:
        raise SystemExit(f"sbuf init --engine postgresql failed: {done.stderr.strip()}")
    paths = resolve_store(View.PROJECT, home / "project", PlatformDirs(home / "data", home / "cache"))
    scope = record_scope(paths)
    index = pj.existing_index_path(directory)
    assert index is not None
    with pj.reading(index) as conn:
        order = [path for (path,) in conn.execute("SELECT r.path FROM chunks AS c JOIN records AS r ON "
                                                  "r.id = c.record_id GROUP BY r.path ORDER BY min(c.id)")]  # fmt: skip
    writes = []
    for path in order:
        record = parse_markdown((directory.root / path).read_bytes())
        writes.append(FileWrite(paths.root / path, render_markdown(replace(record, scope=scope)).encode(), None))
    os.environ[URL_VARIABLE] = env[URL_VARIABLE]
    variable = read_config(paths).database
    assert variable is not None
    watch, before = Stopwatch(), load()
    targets = {
        "record_rows": (
            store.PostgreSQLTransaction,
            "insert_all" if hasattr(store.PostgreSQLTransaction, "insert_all") else "insert",
        ),
        "projection": (store.PostgreSQLTransaction, "project"),
        "projection.chunking": (projecting, "record_chunks"),
        "projection.postings_copy": (projecting, "_copy_postings"),
        "analyze": (store.PostgreSQLTransaction, "refresh_statistics"),
        "vectors.embedding": (projecting, "_chunk_vectors"),
        "hnsw_index": (projecting, "ensure_vector_index"),
    }
    print(f"writing {len(writes)} records into PostgreSQL …", file=sys.stderr)
    with watch.timing(targets), watch.stage("total"):
        with watch.stage("write_all"):
            engine = open_record_store(paths, scope, 30.0, None)
            with engine.locked():
                engine.write_all(writes, None)
        print("embedding them …", file=sys.stderr)
        with watch.stage("vectors"):
            catch_up(paths, embedder)
        with connection(variable) as conn:
            indexed = projecting.ensure_vector_index(conn)
    return {"seconds": watch.rounded(), "hnsw_index": indexed, "load_average": [before, load()]}


def corpus_store(home: Path, records: int, sample: int) -> tuple[Any, Any]:
    """A directory store of `records` corpus records and the `MixedVectors` embedder for them."""
    from stormbuffer.core.stores import PlatformDirs, View, initialize_store, record_scope, resolve_store
    from stormbuffer.embedding import acquire_model, load_embedder

    (home / "project").mkdir(parents=True)
    paths = resolve_store(View.PROJECT, home / "project", PlatformDirs(home / "data", home / "cache"))
    initialize_store(paths)
    write_store(paths.records, record_scope(paths), records)
    acquire_model(paths.cache_dir)
    real = load_embedder(paths.cache_dir)
    texts = [path.read_text(encoding="utf-8").split("+++", 2)[2][:400] for path in sorted(paths.records.iterdir())]
    return paths, MixedVectors(real, real.embed(texts[:sample]))


def longmemeval_store(home: Path, data: Path, turns: int) -> tuple[Any, Any]:
    """A directory store of `turns` LongMemEval-S turns (as bench/load_rate.py writes them) and the real model."""
    from load_rate import haystacks
    from quality import build_longmemeval_store, new_store
    from shared_data import require

    from stormbuffer.embedding import acquire_model, load_embedder

    require(data)
    paths = new_store(home)
    for item in haystacks(data, turns):
        build_longmemeval_store(paths, item)
    acquire_model(paths.cache_dir)
    return paths, load_embedder(paths.cache_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=("corpus", "longmemeval"), default="corpus")
    parser.add_argument("--records", type=int, default=10_000, help="corpus records (--source corpus)")
    parser.add_argument("--sample", type=int, default=256, help="real vectors mixed (--source corpus)")
    parser.add_argument("--turns", type=int, default=981, help="LongMemEval-S turns (--source longmemeval)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--label", help="save to bench/results/pg_build[-SOURCE]-LABEL.json")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="sbuf-pg-build-"))
    if args.source == "corpus":
        directory, embedder = corpus_store(work / "directory", args.records, args.sample)
        vectors = f"unit mixes of two of {args.sample} real-model vectors per text (labelled: cheap embedding)"
    else:
        directory, embedder = longmemeval_store(work / "directory", args.data, args.turns)
        vectors = "the real model (chunk and sentence vectors)"
    print("syncing the directory store …", file=sys.stderr)
    directory_build = build_directory(directory, embedder)
    server = PostgresServer.start()
    try:
        database = server.create_database().split("@/", 1)[1].split("?", 1)[0]
        env = {**environment(work / "postgresql", "cache"), URL_VARIABLE: server.tcp_url(database)}
        postgresql_build = build_postgresql(work / "postgresql", env, directory, embedder)
    finally:
        server.stop()
    version = version_seconds()
    totals = {"directory": directory_build["seconds"]["total"], "postgresql": postgresql_build["seconds"]["total"]}
    results = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": args.source, "records": len(list(directory.records.glob("*.md"))), "record_vectors": vectors,
        "build_s": totals, "build_postgresql_over_directory": round(totals["postgresql"] / totals["directory"], 2),
        "directory": directory_build, "postgresql": postgresql_build,
        "sbuf_version_s": round(version, 3),
        "postgresql_build_over_version": round(totals["postgresql"] / version, 1),
        "machine": machine(),
    }  # fmt: skip
    name = RESULTS if args.source == "corpus" else RESULTS.with_name(f"pg_build-{args.source}.json")
    save(results, name, args.label)


if __name__ == "__main__":
    main()

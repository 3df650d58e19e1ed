"""Scale benchmark: sync, reindex, search and context latency, size on disk and memory by store size.

For each size a deterministic store is generated (bench/corpus.py) in its own process, then:

- initial lexical sync (records/s, chunks/s) and embedding of every chunk with the real model
  (texts/s) — up to `--embed-up-to` records. Above that, vectors come from a labelled fast path:
  each chunk gets the real-model vector of a chunk of the largest smaller store already built
  (picked by a hash of its embedding text); retrieval cost is the same, recall is meaningless;
- a fresh process, like a one-shot CLI call (modules imported before timing): its no-change
  sync ("cold"), its first hybrid context, and its peak RSS after a context per query;
- warm no-change sync (repeated calls in one process), with the model loaded as the CLI does,
  interleaved with the platform's floor for it: listing the tree and one lstat per record file;
- sync after editing one record (re-embeds its chunks, writes their vectors as a new matrix segment);
- reindex (new database beside the old one, vectors carried over): records/s, chunks/s;
- search and context (limit 10, budget 512), lexical and hybrid, in process: p50/p95 over the
  query set (the hybrid figure includes embedding the query);
- projection size on disk (database, WAL, vector matrix files) and peak RSS of the benchmark
  process (which includes embedding in batches, the largest memory user).

Prints a table and writes bench/results/scale.json (sizes not run this time keep their latest results).

Usage: python bench/scale.py [--sizes 1000,10000,100000] [--rounds 5] [--work DIR] [--embed-up-to 10000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from corpus import QUERIES, write_store  # noqa: E402
from embedding_cache import CachingEmbedder  # noqa: E402

from stormbuffer.core.stores import PlatformDirs, StorePaths, View, initialize_store, record_scope, resolve_store
from stormbuffer.embedding import acquire_model, load_embedder
from stormbuffer.index.readers import keep_warm
from stormbuffer.index.sync import SyncReport, reindex_store, sync_store
from stormbuffer.retrieval import ContextOptions, SearchOptions, context, search

RESULTS = Path(__file__).parent / "results" / "scale.json"


class ReusedVectors:
    """The fast path for stores too large to embed here: the real model's identity and tokenizer, and for
    each text the real vector of a chunk of a smaller store, chosen by a hash of the text."""

    def __init__(self, real: Any, sample: np.ndarray) -> None:
        self._real, self._sample = real, sample
        self.model_id, self.model_version = real.model_id, real.model_version
        self.model_checksum, self.dimension, self.max_tokens = real.model_checksum, real.dimension, real.max_tokens

    def token_count(self, text: str) -> int:
        return int(self._real.token_count(text))

    def embed(self, texts: list[str]) -> np.ndarray:
        picks = [int(hashlib.sha256(text.encode()).hexdigest()[:12], 16) % len(self._sample) for text in texts]
        return np.ascontiguousarray(self._sample[picks])


@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[str, int, int], None]]:
    """A rich progress bar on a terminal's stderr; silent otherwise."""
    if not sys.stderr.isatty():
        yield lambda phase, done, total: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn(label + " {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bars:
        tasks: dict[str, Any] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bars.add_task(phase, total=total)
            bars.update(tasks[phase], completed=done, total=total)

        yield update


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def rank(share: float) -> float:  # nearest rank
        return ordered[max(0, min(len(ordered) - 1, round(share * len(ordered) + 0.5) - 1))]

    return {"p50_ms": round(rank(0.50) * 1000, 2), "p95_ms": round(rank(0.95) * 1000, 2),
            "max_ms": round(ordered[-1] * 1000, 2)}  # fmt: skip


def stat_every_file(directory: Path) -> int:
    """The floor of any freshness check, without Stormbuffer: list the tree and lstat every `*.md` file."""
    count = 0
    for root, _directories, names in os.walk(directory):
        for name in names:
            if name.endswith(".md"):
                os.lstat(os.path.join(root, name))
                count += 1
    return count


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def store_for(work: Path, size: int) -> StorePaths:
    base = work / f"store-{size}"
    (base / "project").mkdir(parents=True, exist_ok=True)
    return resolve_store(View.PROJECT, base / "project", PlatformDirs(base / "data", work / "cache"))


def projection_bytes(paths: StorePaths) -> dict[str, int]:
    files = [entry for entry in paths.root.iterdir() if entry.name.startswith(paths.index_name)]
    return {
        "database": sum(f.stat().st_size for f in files if not f.name.endswith(".npy")),
        "vector_matrix": sum(f.stat().st_size for f in files if f.name.endswith(".npy")),
    }


def sample_vectors(work: Path, size: int) -> tuple[np.ndarray, str]:
    """Real-model vectors of the largest smaller store already built in `work`."""
    built = sorted(int(p.name.split("-")[1]) for p in work.glob("store-*") if int(p.name.split("-")[1]) < size)
    for smaller in reversed(built):
        database = store_for(work, smaller).index_path
        if database.is_file():
            with sqlite3.connect(database) as conn:
                blobs = [row[0] for row in conn.execute("SELECT vector FROM vectors ORDER BY embed_hash")]
            if blobs:
                matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1)
                return matrix, f"real-model vectors of the {smaller}-record store ({len(blobs)} vectors), reused"
    raise SystemExit(f"the {size}-record fast path needs a smaller store embedded first (run smaller sizes first)")


def run_one(size: int, work: Path, rounds: int, embed_up_to: int) -> dict[str, Any]:
    paths = store_for(work, size)
    shutil.rmtree(paths.root.parent.parent)  # a fresh store every run (the embedding cache is kept)
    paths.root.parent.mkdir(parents=True)
    initialize_store(paths)
    scope = record_scope(paths)
    result: dict[str, Any] = {"records": size}
    with progress_bar(f"{size:>7} records:") as bar:
        started = time.perf_counter()
        write_store(paths.records, scope, size, lambda done: bar("writing", done, size))
        result["generate_s"] = round(time.perf_counter() - started, 2)

        def sync_progress(phase: str, done: int, total: int, _report: object) -> None:
            bar(phase, done, total)

        start = time.perf_counter()
        first = sync_store(paths, progress=sync_progress)
        result["initial_sync"] = rates(first, time.perf_counter() - start)
        real = load_embedder(work / "cache" / "stormbuffer")
        if size <= embed_up_to:
            embedder: Any = CachingEmbedder(real, work / "embeddings.sqlite3")
            result["vectors"] = "real model (every chunk; vectors cached by text across benchmark runs)"
        else:
            sample, label = sample_vectors(work, size)
            embedder = ReusedVectors(real, sample)
            result["vectors"] = f"FAST PATH: {label}"
        start = time.perf_counter()
        embedded = sync_store(paths, embedder, progress=sync_progress)
        result["embedding"] = rates(embedded, time.perf_counter() - start)
        if isinstance(embedder, CachingEmbedder) and embedder.fresh:
            result["embedding"]["model_texts_per_s"] = round(embedder.fresh / embedder.fresh_seconds, 1)

        sync_store(paths, embedder)  # settle: nothing left to do
        result.update(fresh_process(paths, work))
        warm, floor = [], []
        for _ in range(max(rounds * 4, 20)):  # interleaved, so that both see the same moments of the host
            warm.append(timed(lambda: sync_store(paths, embedder)))
            floor.append(timed(lambda: stat_every_file(paths.records)))
        result["warm_no_change_sync"] = percentiles(warm)
        result["stat_floor"] = percentiles(floor)
        result["sync_over_floor"] = percentiles([sync - bare for sync, bare in zip(warm, floor, strict=True)])

        edited = next(iter(sorted(paths.records.glob("*.md"))))
        text = edited.read_text(encoding="utf-8")
        edited.write_text(text + "\n\nEdited for the benchmark.\n", encoding="utf-8")  # a new last paragraph
        start = time.perf_counter()
        edit = sync_store(paths, embedder)
        assert edit.indexed == 1 and not edit.invalid_files, "the edited record must be re-projected"
        result["edit_one_record_sync"] = {"ms": round((time.perf_counter() - start) * 1000, 1),
                                          "indexed": edit.indexed, "embedded": edit.embedded}  # fmt: skip

        start = time.perf_counter()
        rebuilt = reindex_store(paths, embedder, progress=sync_progress)
        result["reindex"] = rates(rebuilt, time.perf_counter() - start)

        for mode in ("lexical", "hybrid"):
            result.update(query_latency(paths, mode, real, rounds, bar))
    result["projection_bytes"] = projection_bytes(paths)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


def rates(report: SyncReport, seconds: float) -> dict[str, Any]:
    per_second = {name: round(getattr(report, name) / seconds, 1) for name in ("indexed", "chunks", "embedded")}
    return {"seconds": round(seconds, 2), "indexed": report.indexed, "chunks": report.chunks,
            "embedded": report.embedded, "records_per_s": per_second["indexed"],
            "chunks_per_s": per_second["chunks"], "texts_per_s": per_second["embedded"]}  # fmt: skip


def query_latency(paths: StorePaths, mode: str, embedder: Any, rounds: int,
                  bar: Callable[[str, int, int], None]) -> dict[str, Any]:  # fmt: skip
    """p50/p95 of search and context (limit 10, budget 512) over the query set, after one warm-up pass,
    reading as the daemon and the servers do (idle read connections kept)."""
    keep_warm()
    stores = [paths]
    options = SearchOptions(limit=10, mode=mode)
    budget = ContextOptions(budget=512, search=options)
    for query in QUERIES:  # warm-up: page cache, mappings, compiled statements
        context(stores, query, budget, embedder=embedder)
    search_times, context_times, context_cpu = [], [], []
    for round_number in range(rounds):
        bar(f"{mode} queries", round_number, rounds)
        for query in QUERIES:
            start = time.perf_counter()
            search(stores, query, options, embedder=embedder)
            search_times.append(time.perf_counter() - start)
            start, cpu = time.perf_counter(), time.process_time()
            receipt = context(stores, query, budget, embedder=embedder).receipt
            context_times.append(time.perf_counter() - start)
            context_cpu.append(time.process_time() - cpu)
            assert receipt["retrieval_mode"] == mode, receipt
    return {f"search_{mode}": percentiles(search_times), f"context_{mode}": percentiles(context_times),
            f"context_{mode}_cpu": percentiles(context_cpu)}  # fmt: skip


FRESH_PROCESS = """
import json, resource, sys, time
from pathlib import Path
from stormbuffer.core.stores import PlatformDirs, View, resolve_store
from stormbuffer.embedding import load_embedder
from stormbuffer.index.sync import sync_store
from stormbuffer.retrieval import context
import sqlalchemy, numpy  # imported before timing: this measures the sync, not Python's imports
base, cache, queries = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
paths = resolve_store(View.PROJECT, base / "project", PlatformDirs(base / "data", cache))
embedder = load_embedder(cache / "stormbuffer")
start = time.perf_counter()
report = sync_store(paths, embedder)
sync_ms = (time.perf_counter() - start) * 1000
assert report.indexed == 0 and report.hashed == 0 and report.embedded == 0, report
start = time.perf_counter()
receipt = context([paths], queries[0], embedder=embedder).receipt
first_context_ms = (time.perf_counter() - start) * 1000
assert receipt["retrieval_mode"] == "hybrid", receipt
for query in queries[1:]:
    context([paths], query, embedder=embedder)
try:  # the high-water mark of this process image (ru_maxrss would include the forking parent's)
    rss = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) / 1024
except (OSError, StopIteration):
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"cold_no_change_sync_ms": round(sync_ms, 1), "first_hybrid_context_ms": round(first_context_ms, 1),
                  "query_process_peak_rss_mb": round(rss, 1)}))
"""


def fresh_process(paths: StorePaths, work: Path) -> dict[str, float]:
    """A new process, as a one-shot CLI call: no-change sync, then hybrid context for every query."""
    base = paths.root.parent.parent
    done = subprocess.run([sys.executable, "-c", FRESH_PROCESS, str(base), str(work / "cache"), json.dumps(QUERIES)],
                          check=True, capture_output=True, text=True)  # fmt: skip
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        ("records", lambda r: f"{r['records']:,}"),
        ("chunks", lambda r: f"{r['initial_sync']['chunks']:,}"),
        ("initial sync records/s", lambda r: f"{r['initial_sync']['records_per_s']:,}"),
        ("model embedding texts/s", lambda r: f"{r['embedding'].get('model_texts_per_s', 'cached')}"),
        ("cold no-change sync ms", lambda r: f"{r['cold_no_change_sync_ms']}"),
        ("warm no-change sync p50/p95 ms", lambda r: _pair(r["warm_no_change_sync"])),
        ("  list + lstat every file p50/p95 ms", lambda r: _pair(r.get("stat_floor"))),
        ("  sync minus that, paired, p50/p95 ms", lambda r: _pair(r.get("sync_over_floor"))),
        ("edit one record + sync ms", lambda r: f"{r['edit_one_record_sync']['ms']}"),
        ("reindex records/s", lambda r: f"{r['reindex']['records_per_s']:,}"),
        ("reindex chunks/s", lambda r: f"{r['reindex']['chunks_per_s']:,}"),
        ("search lexical p50/p95 ms", lambda r: _pair(r["search_lexical"])),
        ("search hybrid p50/p95 ms", lambda r: _pair(r["search_hybrid"])),
        ("context lexical p50/p95 ms", lambda r: _pair(r["context_lexical"])),
        ("context hybrid p50/p95 ms", lambda r: _pair(r["context_hybrid"])),
        ("context hybrid CPU p50/p95 ms", lambda r: _pair(r["context_hybrid_cpu"])),
        ("database MB", lambda r: f"{r['projection_bytes']['database'] / 1e6:.1f}"),
        ("vector matrix MB", lambda r: f"{r['projection_bytes']['vector_matrix'] / 1e6:.1f}"),
        ("first hybrid context, fresh process ms", lambda r: f"{r['first_hybrid_context_ms']}"),
        ("peak RSS, query process MB", lambda r: f"{r['query_process_peak_rss_mb']}"),
        ("peak RSS, benchmark process MB", lambda r: f"{r['peak_rss_mb']}"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  " + "  ".join(f"{fmt(r):>14}" for r in results) for name, fmt in rows]
    return "\n".join(lines)


def _pair(values: dict[str, float] | None) -> str:
    """p50/p95; "-" for a measure an older result of that size does not have."""
    return "-" if values is None else f"{values['p50_ms']}/{values['p95_ms']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--rounds", type=int, default=5, help="passes over the query set per mode")
    parser.add_argument("--work", type=Path, help="stores and the embedding cache (kept between runs)")
    parser.add_argument("--embed-up-to", type=int, default=10000, help="largest size embedded by the real model")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="stormbuffer-scale-"))
    if args.one is not None:
        print(json.dumps(run_one(args.one, work, args.rounds, args.embed_up_to)))
        return
    acquire_model(work / "cache" / "stormbuffer")
    results = []
    for size in sorted(int(value) for value in args.sizes.split(",")):
        command = [sys.executable, __file__, "--one", str(size), "--work", str(work), "--rounds", str(args.rounds),
                   "--embed-up-to", str(args.embed_up_to)]  # fmt: skip
        done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        result["load_average_after"] = [round(value, 2) for value in os.getloadavg()]
        results.append(result)
        print(f"done: {size} records", file=sys.stderr)
    print(table(results))
    for item in results:
        print(f"{item['records']:>7} records: vectors = {item['vectors']}")
    earlier = json.loads(RESULTS.read_text())["results"] if RESULTS.is_file() else []
    by_size = {item["records"]: item for item in earlier} | {item["records"]: item for item in results}
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
                    "sqlite": sqlite3.sqlite_version},
        "work_dir": str(work),
        "results": [by_size[size] for size in sorted(by_size)],  # a run of some sizes keeps the others' latest
    }  # fmt: skip
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {RESULTS}")


if __name__ == "__main__":
    main()

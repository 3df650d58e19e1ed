"""Latency of one `sbuf invoke` process on a 10,000-record project store (wall time, median of N runs).

Measures, each as a fresh process the way agents and plugins call it:

- `sbuf --version` (the floor: interpreter, click, the command table);
- `sbuf --project invoke search` and `invoke context` with the model (hybrid retrieval, which
  includes loading the model and embedding the query) and without it (lexical, `model_unavailable`);
- `sbuf --project invoke get`.

Targets: search <= 0.5 s, hybrid context <= 0.8 s, `--version` <= 0.15 s (median wall time). The
median CPU time (user + system) of the process and its model child is reported beside it: on a shared, loaded machine
wall time includes waiting for a core, CPU time does not. The store comes from
bench/corpus.py. Embedding 10,000 records with the real model takes far too long on a small
machine, so the vectors come from the labelled fast path of bench/scale.py: the real model's
identity, and for each chunk the real vector of one of a few hundred really embedded chunks. The
per-query work is identical; only recall is meaningless. Results print as a table and are saved
to bench/results/invoke_latency.json with the machine's load average.

Usage: python bench/invoke_latency.py [--records 10000] [--runs 15] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from corpus import QUERIES, write_store  # noqa: E402
from machine import machine  # noqa: E402
from scale import ReusedVectors  # noqa: E402

from stormbuffer.core.stores import PlatformDirs, StorePaths, View, initialize_store, record_scope, resolve_store
from stormbuffer.embedding import acquire_model, load_embedder
from stormbuffer.index.sync import sync_store

RESULTS = Path(__file__).parent / "results" / "invoke_latency.json"
SBUF = Path(sys.executable).parent / "sbuf"
SAMPLE_TEXTS = 256
TARGETS_S = {"version": 0.15, "search_hybrid": 0.5, "context_hybrid": 0.8}


def environment(work: Path, cache: str) -> dict[str, str]:
    """The benchmark store's home and cache, and byte-code caching on as for any installed command (the
    warm-up run writes the `.pyc` files the timed runs use). Without the daemon: this benchmark and
    bench/mcp_latency.py measure the in-process paths, bench/daemon.py the daemon."""
    skipped = ("XDG_", "STORMBUFFER_", "PYTHONDONTWRITEBYTECODE")
    env = {key: value for key, value in os.environ.items() if not key.startswith(skipped)}
    env.update(HOME=str(work / "home"), XDG_DATA_HOME=str(work / "data"), XDG_CACHE_HOME=str(work / cache))
    env["STORMBUFFER_NO_DAEMON"] = "1"
    return env


def build(work: Path, records: int) -> StorePaths:
    """The project store with its projection and vectors in place (reused when already built)."""
    project = work / "project"
    project.mkdir(parents=True, exist_ok=True)
    paths = resolve_store(View.PROJECT, project, PlatformDirs(work / "data", work / "cache"))
    initialize_store(paths)
    acquire_model(paths.cache_dir)
    if not any(paths.records.glob("*.md")):
        print(f"writing {records} records …", file=sys.stderr)
        write_store(paths.records, record_scope(paths), records)
    real = load_embedder(paths.cache_dir)
    sync_store(paths)
    with sqlite3.connect(paths.index_path) as conn:
        texts = [
            row[0]
            for row in conn.execute(
                "SELECT DISTINCT embed_text FROM chunks ORDER BY embed_hash LIMIT ?", (SAMPLE_TEXTS,)
            )
        ]
    print(f"embedding {len(texts)} sample chunks with the real model …", file=sys.stderr)
    sample = np.ascontiguousarray(real.embed(texts))
    report = sync_store(paths, ReusedVectors(real, sample))
    print(f"vectors ready ({report.embedded} texts given reused vectors)", file=sys.stderr)
    return paths


def timed_run(args: list[str], cwd: Path, env: dict[str, str], stdin: bytes = b"") -> tuple[float, float, bytes]:
    """Wall time and CPU time (user + system) of one `sbuf` process, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    completed = subprocess.run([str(SBUF), *args], cwd=cwd, env=env, input=stdin, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0 or completed.stderr:
        raise SystemExit(f"sbuf {' '.join(args)} failed: {completed.stdout[:300]!r} {completed.stderr[:300]!r}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu, completed.stdout


def measure(name: str, runs: int, make: Any, check: Any = None) -> dict[str, Any]:
    """One warm-up, then `runs` timed processes; `make(i)` gives (args, cwd, env, stdin)."""
    timed_run(*make(-1))
    walls, cpus = [], []
    for index in range(runs):
        wall, cpu, stdout = timed_run(*make(index))
        if check is not None:
            check(json.loads(stdout))
        walls.append(wall)
        cpus.append(cpu)
    walls.sort()
    return {
        "name": name,
        "runs": runs,
        "median_s": round(statistics.median(walls), 3),
        "min_s": round(walls[0], 3),
        "p90_s": round(walls[int(0.9 * (len(walls) - 1))], 3),
        "max_s": round(walls[-1], 3),
        "median_cpu_s": round(statistics.median(cpus), 3),
    }


def receipt_mode(expected: str) -> Any:
    def check(envelope: dict[str, Any]) -> None:
        receipt = envelope["result"]["receipt"]
        assert envelope["ok"] and receipt["retrieval_mode"] == expected, receipt

    return check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sbuf-invoke-bench"))
    options = parser.parse_args()
    work = options.work / f"store-{options.records}"
    paths = build(work, options.records)
    cwd = paths.root.parent
    with_model, without_model = environment(work, "cache"), environment(work, "empty-cache")
    record_id = next(paths.records.glob("*.md")).stem

    def request(operation: str, payload: dict[str, Any], env: dict[str, str]) -> Any:
        def make(index: int) -> tuple[list[str], Path, dict[str, str], bytes]:
            body = {"version": 1, **payload}
            if "query" in body:
                body["query"] = QUERIES[index % len(QUERIES)]
            return ["--project", "invoke", operation], cwd, env, json.dumps(body).encode()

        return make

    runs = options.runs
    results = [
        measure("version", runs, lambda _i: (["--version"], cwd, with_model, b"")),
        measure("search_hybrid", runs, request("search", {"query": "", "limit": 10}, with_model)),
        measure(
            "context_hybrid", runs, request("context", {"query": "", "budget": 512}, with_model), receipt_mode("hybrid")
        ),
        measure("search_lexical", runs, request("search", {"query": "", "limit": 10}, without_model)),
        measure(
            "context_lexical",
            runs,
            request("context", {"query": "", "budget": 512}, without_model),
            receipt_mode("lexical"),
        ),
        measure("get", runs, request("get", {"id": record_id}, with_model)),
    ]
    for result in results:
        target = TARGETS_S.get(result["name"])
        result["target_s"] = target
        result["meets_target"] = None if target is None else result["median_s"] <= target
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "records": options.records,
        "vectors": f"FAST PATH: real model identity, vectors reused from {SAMPLE_TEXTS} really embedded chunks",
        "results": results,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{'measure':<16} {'median s':>9} {'min s':>7} {'p90 s':>7} {'cpu s':>7} {'target':>7}  ok")
    for result in results:
        target = "" if result["target_s"] is None else f"{result['target_s']:.2f}"
        ok = {True: "yes", False: "NO", None: ""}[result["meets_target"]]
        print(
            f"{result['name']:<16} {result['median_s']:>9.3f} {result['min_s']:>7.3f} {result['p90_s']:>7.3f} "
            f"{result['median_cpu_s']:>7.3f} {target:>7}  {ok}"
        )
    print(f"load average at the end: {report['machine']['load_average_at_end']}; saved to {RESULTS}")


if __name__ == "__main__":
    main()

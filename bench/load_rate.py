"""Bulk load rate: LongMemEval-S turns written as records, then one sync that embeds them all.

Takes the turns of the first LongMemEval-S questions' haystacks (from ../shared/bench; `--data`
overrides) up to `--turns` (default 981: the first two questions, the set other memory services
were measured on), writes one record per turn as `bench/quality.py` does, and times one
`sync_store` with the real model, no embedding cache: chunking, the chunk vectors and the sentence
vectors, the projection and the vector matrix. Reports memories (records) per second, chunks and
sentence vectors, the embedder's workers, and `sbuf --version` timed in the same run.

`--workers N` sets how many model calls run at once during the load (default: the embedder's own
choice); `--repeat N` loads N fresh stores and reports each.

Prints a summary, writes bench/results/load_rate.json (or `--out`).

Usage: python bench/load_rate.py [--data DIR] [--turns 981] [--workers N] [--repeat N] [--out FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from machine import save  # noqa: E402
from quality import build_longmemeval_store, new_store  # noqa: E402
from shared_data import DEFAULT as DEFAULT_DATA  # noqa: E402
from shared_data import require as require_data  # noqa: E402

from stormbuffer.embedding import acquire_model, load_embedder
from stormbuffer.index.sync import sync_store

RESULTS = Path(__file__).parent / "results" / "load_rate.json"


def haystacks(data: Path, turns: int) -> list[dict[str, Any]]:
    """The first questions whose haystacks together hold at least `turns` non-empty turns, the last
    one cut so that exactly `turns` remain."""
    items = json.loads(gzip.decompress((data / "longmemeval" / "longmemeval_s.subset100.seed0.json.gz").read_bytes()))
    chosen, left = [], turns
    for item in items:
        if left <= 0:
            break
        sessions, dates, ids = [], [], []
        for session_id, date, session in zip(item["haystack_session_ids"], item["haystack_dates"],
                                             item["haystack_sessions"], strict=True):  # fmt: skip
            kept = [turn for turn in session if turn["content"].strip()][:left]
            left -= len(kept)
            if kept:
                sessions.append(kept)
                dates.append(date)
                ids.append(session_id)
            if left <= 0:
                break
        chosen.append(item | {"haystack_sessions": sessions, "haystack_dates": dates, "haystack_session_ids": ids})
    return chosen


def version_seconds() -> float:
    started = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "sbuf"), "--version"], check=True, capture_output=True)
    return time.perf_counter() - started


def load_once(work: Path, items: list[dict[str, Any]], embedder: Any) -> dict[str, Any]:
    store = work / "store"
    shutil.rmtree(store, ignore_errors=True)
    paths = new_store(store)
    for item in items:
        build_longmemeval_store(paths, item)
    records = sum(1 for _ in paths.records.glob("*.md"))
    load_before = os.getloadavg()[0]
    started, cpu_started = time.perf_counter(), time.process_time()
    report = sync_store(paths, embedder)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    with sqlite3.connect(paths.index_path) as conn:
        (sentences,) = conn.execute("SELECT coalesce(sum(length(sentence_vectors)), 0) FROM vectors").fetchone()
    return {
        "records": records,
        "chunks": report.chunks,
        "texts_embedded": report.embedded,
        "sentence_vectors": sentences // (4 * embedder.dimension),
        "seconds": round(seconds, 2),
        "memories_per_s": round(records / seconds, 2),
        "cpu_s": round(cpu, 2),
        "cpu_s_per_memory": round(cpu / records, 4),
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--turns", type=int, default=981)
    parser.add_argument("--workers", type=int, help="model calls run at once (default: the embedder's choice)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--work", type=Path, help="directory for the model cache and the store")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    require_data(args.data)
    work = args.work or Path(tempfile.mkdtemp(prefix="stormbuffer-load-"))
    acquire_model(work / "model-cache")
    embedder = load_embedder(work / "model-cache")
    if args.workers is not None:
        embedder.workers = args.workers
    items = haystacks(args.data, args.turns)
    version = version_seconds()
    runs = []
    for number in range(1, max(args.repeat, 1) + 1):
        run = load_once(work, items, embedder)
        runs.append(run)
        print(f"run {number}: {run['records']} memories, {run['chunks']} chunks, {run['sentence_vectors']} sentence "
              f"vectors in {run['seconds']} s: {run['memories_per_s']} memories/s, {run['cpu_s']} CPU s "
              f"({run['cpu_s_per_memory']} per memory), load average {run['load_average_1min']}",
              flush=True)  # fmt: skip
    version = min(version, version_seconds())
    result = {
        "turns": args.turns,
        "workers": getattr(embedder, "workers", 1),
        "model": embedder.model_version,
        "sbuf_version_s": round(version, 3),
        "runs": runs,
        "best_memories_per_s": max(run["memories_per_s"] for run in runs),
        "load_ratio_to_version": round(min(run["seconds"] for run in runs) / version, 1),
    }
    print(f"best {result['best_memories_per_s']} memories/s; `sbuf --version` {result['sbuf_version_s']} s; "
          f"load average at end {[round(value, 2) for value in os.getloadavg()]}")  # fmt: skip
    save(args.out, result)


if __name__ == "__main__":
    main()

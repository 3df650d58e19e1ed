"""Where a bulk load's time goes: CPU seconds per stage of the `bench/load_rate.py` load.

Loads the same LongMemEval-S turns (from ../shared/bench; `--data` overrides) with one sync and
times each stage in the thread that runs it (`time.thread_time`, so the model calls running at
once on the embedder's workers are each counted): parsing and chunking the records into the
projection, tokenising, the model runs, pooling sentence vectors from token states, and the rest
(finding sentences, SQLite writes of the vectors, the vector matrix). Also wall seconds, the whole
process's CPU seconds, CPU seconds per memory, and the load average.

Prints a table, writes bench/results/load_stages.json (or `--out`).

Usage: python bench/load_stages.py [--data DIR] [--turns 981] [--work DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from load_rate import haystacks, load_once, version_seconds  # noqa: E402
from machine import save  # noqa: E402
from shared_data import DEFAULT as DEFAULT_DATA  # noqa: E402
from shared_data import require as require_data  # noqa: E402

from stormbuffer.embedding import acquire_model, load_embedder
from stormbuffer.index import sync

RESULTS = Path(__file__).parent / "results" / "load_stages.json"


class Stages:
    """CPU seconds per named stage, summed over threads; a stage inside another is subtracted from it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()
        self._local = threading.local()

    def timed(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            stack = self._local.__dict__.setdefault("stack", [])
            stack.append(0.0)
            started = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent = time.thread_time() - started
                inner = stack.pop()
                if stack:
                    stack[-1] += spent
                with self._lock:
                    self.seconds[name] += spent - inner

        return wrapper


class _TimedSession:
    """An onnxruntime session whose `run` is timed as the "model" stage."""

    def __init__(self, session: Any, stages: Stages) -> None:
        self._session = session
        self.run = stages.timed("model", session.run)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--turns", type=int, default=981)
    parser.add_argument("--work", type=Path, help="directory for the model cache and the store")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    require_data(args.data)
    work = args.work or Path(tempfile.mkdtemp(prefix="stormbuffer-stages-"))
    acquire_model(work / "model-cache")
    embedder = load_embedder(work / "model-cache")
    stages = Stages()
    embedder._session = _TimedSession(embedder._session, stages)
    embedder._tokens.token_spans = stages.timed("tokenise", embedder._tokens.token_spans)
    embedder._tokens.token_ids = stages.timed("tokenise", embedder._tokens.token_ids)
    embedder._pool_spans = stages.timed("pool sentences", embedder._pool_spans)
    sync.project_records = stages.timed("parse, chunk, project", sync.project_records)
    sync._chunk_vectors = stages.timed("rest of embedding (sentences, batching)", sync._chunk_vectors)
    items = haystacks(args.data, args.turns)
    version = version_seconds()
    cpu_started = time.process_time()
    run = load_once(work, items, embedder)
    cpu = time.process_time() - cpu_started
    timed = sum(stages.seconds.values())
    table = dict(sorted(stages.seconds.items(), key=lambda item: -item[1]))
    table["other (SQLite vectors, matrix, store setup)"] = max(0.0, cpu - timed)
    result = {
        **run,
        "workers": embedder.workers,
        "cpu_s": round(cpu, 2),
        "cpu_s_per_memory": round(cpu / run["records"], 4),
        "stages_cpu_s": {name: round(seconds, 2) for name, seconds in table.items()},
        "sbuf_version_s": round(version, 3),
        "load_average_end": [round(value, 2) for value in os.getloadavg()],
    }
    print(f"{run['records']} memories in {run['seconds']} s wall ({run['memories_per_s']} memories/s), "
          f"{result['cpu_s']} CPU s ({result['cpu_s_per_memory']} per memory); "
          f"load average {result['load_average_end']}")  # fmt: skip
    for name, seconds in table.items():
        print(f"  {name:45} {seconds:8.2f} CPU s  {100 * seconds / cpu:5.1f} %")
    save(args.out, result)


if __name__ == "__main__":
    main()

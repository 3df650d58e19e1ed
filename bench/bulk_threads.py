"""Bulk embedding throughput by how the cores are used: one onnxruntime thread (one model call at a
time), one thread with two model calls at once (`Embedder.workers`, what a bulk load does), or two
intra-op threads and one call at a time; beside each, the time of one short query.

Texts: the first LongMemEval-S haystack's turns that fit the model (from ../shared/bench; `--data`
overrides), `--texts` of them. The three set-ups are interleaved for `--rounds` rounds, so that a
shared machine's load falls on each alike; prints every round and the best, writes
bench/results/bulk_threads.json.

Usage: python bench/bulk_threads.py [--data DIR] [--work DIR] [--texts 128] [--rounds 4]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from machine import save  # noqa: E402
from shared_data import DEFAULT as DEFAULT_DATA  # noqa: E402
from shared_data import require as require_data  # noqa: E402

from stormbuffer.embedding import acquire_model, load_embedder, sessions

RESULTS = Path(__file__).parent / "results" / "bulk_threads.json"
QUERY = "what did I say about the podcast episode"
SETUPS = {"1 thread, 1 call": (1, 1), "1 thread, 2 calls": (1, 2), "2 threads, 1 call": (2, 1)}


def embedder(cache: Path, threads: int, workers: int) -> Any:
    chosen = sessions._threads
    sessions._threads = lambda: threads  # the session's intra-op threads
    try:
        loaded = load_embedder(cache)
    finally:
        sessions._threads = chosen
    loaded.workers = workers
    return loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--work", type=Path, help="directory for the model cache")
    parser.add_argument("--texts", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    require_data(args.data)
    cache = (args.work or Path(tempfile.mkdtemp(prefix="stormbuffer-threads-"))) / "model-cache"
    acquire_model(cache)
    item = json.loads(
        gzip.decompress((args.data / "longmemeval" / "longmemeval_s.subset100.seed0.json.gz").read_bytes())
    )[0]
    models = {name: embedder(cache, *setup) for name, setup in SETUPS.items()}
    first = next(iter(models.values()))
    turns = [turn["content"] for session in item["haystack_sessions"] for turn in session if turn["content"].strip()]
    texts = [text for text in turns if first.token_count(text) <= first.max_tokens][: args.texts]
    rates: dict[str, list[float]] = {name: [] for name in models}
    queries: dict[str, list[float]] = {name: [] for name in models}
    for _round in range(args.rounds):
        for name, model in models.items():
            started = time.perf_counter()
            model.embed(texts)
            rates[name].append(round(len(texts) / (time.perf_counter() - started), 1))
            started = time.perf_counter()
            for _ in range(20):
                model.embed([QUERY])
            queries[name].append(round((time.perf_counter() - started) / 20 * 1000, 1))
    for name in models:
        print(f"{name}: texts/s {rates[name]} (best {max(rates[name])}); query ms {queries[name]} "
              f"(best {min(queries[name])})")  # fmt: skip
    tokens = sum(first.token_count(text) for text in texts)
    save(RESULTS, {"texts": len(texts), "tokens": tokens, "texts_per_s": rates, "query_ms": queries})


if __name__ == "__main__":
    main()

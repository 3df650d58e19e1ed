"""How long a fresh process takes from "load the embedder" to its first query vector, and the cost per query.

Two ways of opening the default model variant are compared, from copies of one acquired cache:

- `saved graph`: the optimized graph saved at acquisition (what a process normally opens);
- `model file`: `model.onnx`, optimised by onnxruntime in every process (the fallback, and how
  every process opened the model before the optimized graph was saved).

For each, fresh processes (interleaved, median of N) time the imports (stormbuffer.embedding,
numpy, onnxruntime, tokenizers), `load_embedder`, and the first `embed(["query"])`, in wall and
CPU time; then one process measures the latency of single-query embeddings and the throughput on
benchmark chunks, alternating between the two. Results print as a table and are saved to
bench/results/embedding_startup.json with the machine's load average.

Usage: python bench/embedding_startup.py [--runs 9] [--texts 300] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from corpus import QUERIES, make_record
from machine import machine  # noqa: E402

from stormbuffer.embedding import DEFAULT_VARIANT, acquire_model, load_embedder, load_tokenizer
from stormbuffer.embedding.cache import MODELS_DIR, built_dir_name
from stormbuffer.embedding.sessions import OPTIMIZED_NAMES
from stormbuffer.index.chunking import chunk_body
from stormbuffer.index.sync import EMBED_BATCH  # texts per embed call, as sync makes them

RESULTS = Path(__file__).parent / "results" / "embedding_startup.json"
CHILD = """
import json, sys, time
wall, cpu = [time.perf_counter()], [time.process_time()]
def mark():
    wall.append(time.perf_counter()); cpu.append(time.process_time())
from pathlib import Path
from stormbuffer.embedding import load_embedder
import numpy, onnxruntime, tokenizers
mark()
embedder = load_embedder(Path(sys.argv[1]))
mark()
embedder.embed(["query"])
mark()
phases = ("import", "load", "first_embed")
result = {name: (wall[i + 1] - wall[i]) * 1000 for i, name in enumerate(phases)}
result |= {"cpu_" + name: (cpu[i + 1] - cpu[i]) * 1000 for i, name in enumerate(phases)}
result |= {"total": (wall[-1] - wall[0]) * 1000, "cpu_total": (cpu[-1] - cpu[0]) * 1000, "graph": embedder.graph_file}
print(json.dumps(result))
"""


def prepare(source_cache: Path, work: Path) -> dict[str, Path]:
    """Two caches holding the default variant: as acquired, and without its saved graph."""
    acquire_model(source_cache)
    name = built_dir_name(DEFAULT_VARIANT)
    caches = {"saved graph": work / "saved", "model file": work / "model-file"}
    for cache in caches.values():
        shutil.copytree(source_cache / MODELS_DIR / name, cache / MODELS_DIR / name)  # keeps the mtimes
    for file in OPTIMIZED_NAMES:
        (caches["model file"] / MODELS_DIR / name / file).unlink()
    return caches


def fresh_process(cache: Path) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, "-c", CHILD, str(cache)], capture_output=True, check=True, text=True, cwd=tempfile.gettempdir()
    )
    return json.loads(completed.stdout)


def startup(caches: dict[str, Path], runs: int) -> dict[str, dict[str, Any]]:
    samples: dict[str, list[dict[str, Any]]] = {label: [] for label in caches}
    for cache in caches.values():  # warm-up: the file cache
        fresh_process(cache)
    for _ in range(runs):
        for label, cache in caches.items():
            samples[label].append(fresh_process(cache))
    results = {}
    for label, rows in samples.items():
        numbers = [key for key in rows[0] if key != "graph"]
        results[label] = {key: round(statistics.median(row[key] for row in rows), 1) for key in numbers}
        results[label]["graph"] = rows[0]["graph"]
    return results


def benchmark_texts(count: int) -> list[str]:
    """Embedding texts as sync makes them: the chunks of benchmark records, `count` of them."""
    tokens = load_tokenizer()
    texts: list[str] = []
    index = 0
    while len(texts) < count:
        record = make_record(index, "bench")
        texts += [chunk.embed_text for chunk in chunk_body(record.title, record.body, count_tokens=tokens.token_count)]
        index += 1
    return texts[:count]


def steady_state(caches: dict[str, Path], texts: list[str]) -> dict[str, dict[str, Any]]:
    """Query latency and batch throughput of each way of opening, interleaved in one process so that
    a change in the machine's load affects them alike."""
    embedders = {label: load_embedder(cache) for label, cache in caches.items()}
    latencies: dict[str, list[float]] = {label: [] for label in caches}
    batch_seconds = dict.fromkeys(caches, 0.0)
    for embedder in embedders.values():
        for query in QUERIES:
            embedder.embed([query])
    for _ in range(10):
        for query in QUERIES:
            for label, embedder in embedders.items():
                start = time.perf_counter()
                embedder.embed([query])
                latencies[label].append((time.perf_counter() - start) * 1000)
    for first in range(0, len(texts), EMBED_BATCH):
        for label, embedder in embedders.items():
            start = time.perf_counter()
            embedder.embed(texts[first : first + EMBED_BATCH])
            batch_seconds[label] += time.perf_counter() - start
    results = {}
    for label, values in latencies.items():
        values.sort()
        results[label] = {
            "query_p50_ms": round(statistics.median(values), 2),
            "query_p90_ms": round(values[int(0.9 * (len(values) - 1))], 2),
            "batch_texts_per_s": round(len(texts) / batch_seconds[label], 1),
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--cache-dir", type=Path, help="an acquired model cache to copy (default: acquire one)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sbuf-embedding-startup-") as temp:
        work = Path(temp)
        caches = prepare(options.cache_dir or work / "source", work)
        results = startup(caches, options.runs)
        texts = benchmark_texts(options.texts)
        for label, measured in steady_state(caches, texts).items():
            results[label] |= measured
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "variant": DEFAULT_VARIANT,
        "runs": options.runs,
        "batch_texts": len(texts),
        "results": results,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    columns = ("import", "load", "first_embed", "total", "cpu_total", "query_p50_ms", "batch_texts_per_s")
    print(f"{'opens':<12}" + "".join(f"{column:>18}" for column in columns))
    for label, result in results.items():
        print(f"{label:<12}" + "".join(f"{result[column]:>18}" for column in columns))
    load = report["machine"]["load_average_at_end"]
    print(f"medians of {options.runs} fresh processes (ms); load average at the end: {load}")
    print(f"saved to {RESULTS}")


if __name__ == "__main__":
    main()

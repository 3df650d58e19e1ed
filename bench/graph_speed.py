"""CPU per token of the embedding graph, paired and interleaved: the default graph as sessions open it,
the same graph with onnxruntime's SkipLayerNormalization fusion left on, and optionally an earlier
build's `model.onnx` (`--baseline FILE`, e.g. from a model cache made by a previous version).

Texts: LongMemEval-S turns that fit the model (from ../shared/bench; `--data` overrides), run in the
embedder's batches with one intra-op thread, the set-ups taking turns for `--rounds` rounds so a
shared machine's load falls on each alike. Reports CPU microseconds per token (`time.thread_time`:
the session computes in the calling thread) and texts per second for every round, the best and
the median; the wall milliseconds of a one-text query call; the largest cosine gap to the default
graph's vectors; and, from onnxruntime's profiler, each set-up's share of kernel time per operator.

Prints a summary, writes bench/results/graph_speed.json (or `--out`).

Usage: python bench/graph_speed.py [--data DIR] [--work DIR] [--texts 160] [--rounds 5] [--baseline FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from machine import save  # noqa: E402
from shared_data import DEFAULT as DEFAULT_DATA  # noqa: E402
from shared_data import require as require_data  # noqa: E402

from stormbuffer.embedding import DEFAULT_VARIANT, acquire_model, load_embedder, sessions
from stormbuffer.embedding.cache import MODELS_DIR, built_dir_name
from stormbuffer.embedding.embedder import _batches

RESULTS = Path(__file__).parent / "results" / "graph_speed.json"
QUERY = "what did I say about the podcast episode"
QUERIES = 50  # one-text calls per round and set-up


def session(graph: Path, skipped: list[str], profile: str | None = None) -> Any:
    """A session like the embedder's (`sessions._options`), optimised with `skipped` fusions left out."""
    options = sessions._options(optimize=True)
    if profile:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return sessions.runtime().InferenceSession(
        str(graph), options, providers=["CPUExecutionProvider"], disabled_optimizers=skipped
    )


def feeds(ids: list[list[int]]) -> list[dict[str, np.ndarray]]:
    order = sorted(range(len(ids)), key=lambda index: len(ids[index]))
    out = []
    for batch in _batches(order, [len(sequence) for sequence in ids]):
        width = max(len(ids[index]) for index in batch)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros_like(input_ids)
        for row, index in enumerate(batch):
            input_ids[row, : len(ids[index])] = ids[index]
            mask[row, : len(ids[index])] = 1
        out.append({"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)})
    return out


def operator_shares(graph: Path, skipped: list[str], batches: list[dict[str, np.ndarray]], work: Path) -> dict:
    profiled = session(graph, skipped, profile=str(work / "profile"))
    for feed in batches:
        profiled.run(["sentence_embedding"], feed)
    events = json.loads(Path(profiled.end_profiling()).read_text())
    kernel: Counter[str] = Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            kernel[event["args"]["op_name"]] += event["dur"]
    total = sum(kernel.values())
    return {name: round(100 * micros / total, 1) for name, micros in kernel.most_common(8)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--work", type=Path, help="directory for the model cache")
    parser.add_argument("--texts", type=int, default=160)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="an earlier build's model.onnx to compare with")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    require_data(args.data)
    work = args.work or Path(tempfile.mkdtemp(prefix="stormbuffer-graph-"))
    acquire_model(work / "model-cache")
    embedder = load_embedder(work / "model-cache")
    graph = work / "model-cache" / MODELS_DIR / built_dir_name(DEFAULT_VARIANT) / sessions.MODEL_FILE
    item = json.loads(
        gzip.decompress((args.data / "longmemeval" / "longmemeval_s.subset100.seed0.json.gz").read_bytes())
    )[0]
    turns = [turn["content"] for session in item["haystack_sessions"] for turn in session if turn["content"].strip()]
    ids = [sequence for sequence in embedder._tokens.token_ids(turns) if len(sequence) <= embedder.max_tokens]
    ids = ids[: args.texts]
    tokens = sum(len(sequence) for sequence in ids)
    batches = feeds(ids)
    setups: dict[str, tuple[Path, list[str]]] = {
        "default": (graph, sessions.SKIPPED_FUSIONS),
        "SkipLayerNormalization fused": (graph, []),
    }
    if args.baseline:
        setups["baseline"] = (args.baseline, [])
    opened = {name: session(path, skipped) for name, (path, skipped) in setups.items()}
    reference = [opened["default"].run(["sentence_embedding"], feed)[0] for feed in batches]
    gaps = {}
    for name, model in opened.items():
        vectors = [model.run(["sentence_embedding"], feed)[0] for feed in batches]
        gaps[name] = float(min(np.sum(a * b, axis=1).min() for a, b in zip(reference, vectors, strict=True)))
    micros: dict[str, list[float]] = {name: [] for name in opened}
    rates: dict[str, list[float]] = {name: [] for name in opened}
    query_ms: dict[str, list[float]] = {name: [] for name in opened}
    (query,) = feeds(embedder._tokens.token_ids([QUERY]))
    for _round in range(args.rounds):
        for name, model in opened.items():
            started, cpu = time.perf_counter(), time.thread_time()
            for feed in batches:
                model.run(["sentence_embedding"], feed)
            micros[name].append(round((time.thread_time() - cpu) / tokens * 1e6, 1))
            rates[name].append(round(len(ids) / (time.perf_counter() - started), 1))
            started = time.perf_counter()
            for _ in range(QUERIES):
                model.run(["sentence_embedding"], query)
            query_ms[name].append(round((time.perf_counter() - started) / QUERIES * 1000, 2))
    shares = {name: operator_shares(path, skipped, batches, work) for name, (path, skipped) in setups.items()}
    result: dict[str, Any] = {"texts": len(ids), "tokens": tokens, "rounds": args.rounds, "setups": {}}
    for name in opened:
        result["setups"][name] = {
            "cpu_us_per_token": micros[name],
            "best_cpu_us_per_token": min(micros[name]),
            "median_cpu_us_per_token": statistics.median(micros[name]),
            "texts_per_s": rates[name],
            "query_ms": query_ms[name],
            "median_query_ms": statistics.median(query_ms[name]),
            "min_cosine_to_default": round(gaps[name], 7),
            "kernel_time_percent": shares[name],
        }
        print(f"{name}: CPU µs/token {micros[name]} (best {min(micros[name])}, median "
              f"{statistics.median(micros[name])}); texts/s {rates[name]}; one query ms {query_ms[name]}; "
              f"min cosine to default "
              f"{gaps[name]:.7f}; kernel time % {shares[name]}")  # fmt: skip
    result["load_average_end"] = [round(value, 2) for value in os.getloadavg()]
    print(f"{len(ids)} texts, {tokens} tokens; load average at end {result['load_average_end']}")
    save(args.out, result)


if __name__ == "__main__":
    main()

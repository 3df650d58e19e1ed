"""Compare the ONNX model variants (fp32, wq8, int8): cost and agreement with fp32.

For each variant: acquisition (build) time, file size, session load time, batch-1 query latency,
throughput on ~30-word and ~200-word texts, cosine to fp32 on varied sentences, and top-10 overlap
with fp32 when ranking near-duplicate texts. Prints a table and writes
bench/results/embedding_variants.json.

Usage: python bench/embedding_variants.py [--cache-dir DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import numpy as np
import onnxruntime

from stormbuffer.embedding import VARIANTS, acquire_model, load_embedder

RESULTS = Path(__file__).parent / "results" / "embedding_variants.json"
SEED = 20240611

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "How do I reset my password if I lost access to my email?",
    "Rust's borrow checker prevents data races at compile time.",
    "She planted tomatoes and basil in the garden this spring.",
    "The meeting was moved to Thursday afternoon because of the holiday.",
    "Use `git rebase -i HEAD~3` to squash the last three commits.",
    "Photosynthesis converts light energy into chemical energy.",
    "The database connection pool is exhausted under heavy load.",
    "A warm bowl of soup is perfect on a cold winter evening.",
    "The central bank raised interest rates by a quarter point.",
    "Always run the migrations before deploying the new release.",
    "The orchestra performed Beethoven's ninth symphony last night.",
    "Our CI pipeline caches dependencies to speed up builds.",
    "He forgot his umbrella and got soaked walking home.",
    "Memory leaks in long-running services show up as slowly growing RSS.",
    "The museum opens at ten and closes at six on weekdays.",
    "Prefer composition over inheritance for flexible designs.",
    "The hikers reached the summit just before sunrise.",
    "SQLite WAL mode allows readers to proceed while a writer commits.",
    "Children learn languages faster than most adults do.",
    "fix: handle a missing config file without crashing on startup",
    "The API returns 429 when the client exceeds its rate limit.",
    "Volcanic eruptions can cool the planet for several years.",
    "Store secrets in the keychain, never in the repository.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "Vector search finds documents with similar meaning, not just similar words.",
    "Refactor the parser so that errors carry line and column numbers.",
    "Deploy the service behind a load balancer with health checks.",
    "The tokenizer splits rare words into several word pieces.",
    "Our team prefers small pull requests with focused changes.",
    "Timeouts should be configurable per request, not only globally.",
    "Unit tests should not depend on the order in which they run.",
    "Rotate the logs daily and keep them for thirty days.",
    "The cat ignored the expensive toy and played with the box.",
    "Schema validation rejects requests with unknown fields.",
    "Glaciers are retreating faster than scientists predicted.",
    "Pin dependency versions so that builds are reproducible.",
    "Use exponential backoff when retrying failed network calls.",
    "Document every breaking change in the release notes.",
    "The index is rebuilt from the Markdown records on demand.",
    # short queries: the least averaging, so the largest quantisation error
    "ok",
    "database",
    "lock busy",
    "reset password",
    "sbuf init",
    "error",
    "deploy",
    "flaky test",
    "rate limit",
    "cat",
]

VOCABULARY = (
    "system service record memory store index query vector token model cache file folder project user agent "
    "session request response error warning config option value default setting build test release deploy "
    "server client network timeout retry backoff lock write read update delete create search rank score "
    "result context budget chunk section heading title alias tag scope global local proposal review approve "
    "reject supersede archive restore backup import export schema contract envelope field limit batch stream "
    "the a of to and in for on with by from at as is was are be it this that these those when while after "
    "before because so but or not only also very more less fast slow large small new old first last next "
    "every each some many few often rarely always never quickly carefully safely clearly quietly again still"
).split()


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(count)) + "."


def near_duplicates(rng: random.Random, count: int) -> list[str]:
    """Texts built from a few shared templates with small substitutions, so neighbours are close."""
    subjects = ["the index service", "the sync worker", "the backup job", "the retrieval layer", "the CLI"]
    verbs = ["rebuilds", "verifies", "skips", "retries", "locks", "streams", "rejects", "caches"]
    objects = [
        "the vector table",
        "stale chunks",
        "the model cache",
        "changed records",
        "the journal",
        "large files",
        "the projection",
    ]
    conditions = [
        "after a crash",
        "when a file changes",
        "on every start",
        "under heavy load",
        "before a release",
        "when the lock is busy",
        "during import",
    ]
    extras = ["", " quickly", " safely", " again", " in the background", " for every store"]
    return [
        f"{rng.choice(subjects).capitalize()} {rng.choice(verbs)} {rng.choice(objects)}"
        f"{rng.choice(extras)} {rng.choice(conditions)}."
        for _ in range(count)
    ]


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def interleaved(actions: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Time each action `rounds` times, alternating between them so that load from other processes
    on the machine affects every variant alike."""
    samples: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(rounds):
        for name, action in actions.items():
            samples[name].append(timed(action))
    return samples


def top10(queries: np.ndarray, documents: np.ndarray) -> list[list[int]]:
    scores = queries @ documents.T
    return [list(np.argsort(-row, kind="stable")[:10]) for row in scores]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, help="model cache to build into (default: a fresh temp dir)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    variants = ("fp32", *[v for v in VARIANTS if v != "fp32"])
    rows: dict[str, dict[str, float]] = {v: {} for v in variants}
    with tempfile.TemporaryDirectory(prefix="sbuf-bench-") as tmp:
        cache_dir = args.cache_dir or Path(tmp)
        for variant in variants:
            rows[variant]["build_s"] = round(timed(partial(acquire_model, cache_dir, variant=variant)), 2)
            size = (cache_dir / "models" / f"all-MiniLM-L6-v2-{variant}" / "model.onnx").stat().st_size
            rows[variant]["size_mb"] = round(size / 1e6, 1)
            load_embedder(cache_dir, variant=variant)  # warm-up: imports and the file cache
        loads = interleaved({v: partial(load_embedder, cache_dir, variant=v) for v in variants}, 7)
        embedders = {variant: load_embedder(cache_dir, variant=variant) for variant in variants}

    rng = random.Random(SEED)
    short = [words(rng, 30) for _ in range(64)]
    long = [words(rng, 200) for _ in range(32)]
    assert max(embedders["fp32"].token_count(text) for text in long) <= embedders["fp32"].max_tokens
    query = ["how do I configure the database connection pool"]
    interleaved({v: partial(e.embed, query) for v, e in embedders.items()}, 5)  # warm-up
    latencies = interleaved({v: partial(e.embed, query) for v, e in embedders.items()}, 60)
    short_runs = interleaved({v: partial(e.embed, short) for v, e in embedders.items()}, 4)
    long_runs = interleaved({v: partial(e.embed, long) for v, e in embedders.items()}, 3)

    documents = near_duplicates(random.Random(SEED), 300)
    queries = near_duplicates(random.Random(SEED + 1), 20)
    reference_vectors = embedders["fp32"].embed(SENTENCES)
    reference_ranked = top10(embedders["fp32"].embed(queries), embedders["fp32"].embed(documents))
    for variant, embedder in embedders.items():
        cosines = np.sum(embedder.embed(SENTENCES) * reference_vectors, axis=1)
        pairs = list(zip(top10(embedder.embed(queries), embedder.embed(documents)), reference_ranked, strict=True))
        rows[variant] |= {
            "load_ms": median_ms(loads[variant]),
            "query_ms": median_ms(latencies[variant]),
            # best of the runs: the least disturbed by other processes
            "texts_per_s_30w": round(len(short) / min(short_runs[variant]), 1),
            "texts_per_s_200w": round(len(long) / min(long_runs[variant]), 1),
            "cosine_mean": round(float(cosines.mean()), 5),
            "cosine_min": round(float(cosines.min()), 5),
            "top10_overlap": round(statistics.mean(len(set(a) & set(b)) / 10 for a, b in pairs), 3),
            "top1_same": round(statistics.mean(float(a[0] == b[0]) for a, b in pairs), 3),
        }

    columns = list(next(iter(rows.values())))
    print("\n| variant | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for variant, row in rows.items():
        print(f"| {variant} | " + " | ".join(str(row[column]) for column in columns) + " |")
    report = {
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "python": platform.python_version(),
            "onnxruntime": onnxruntime.__version__,
            "numpy": np.__version__,
        },
        "workload": {
            "sentences": len(SENTENCES),
            "near_duplicate_documents": 300,
            "queries": 20,
            "texts_30w": len(short),
            "texts_200w": len(long),
            "load_runs": 7,
            "query_runs": 60,
            "timing": "interleaved across variants; medians, throughput best of 4 (30w) / 3 (200w)",
        },
        "variants": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()

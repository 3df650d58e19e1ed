"""What onnxruntime's CPU memory arena costs and buys a long-running server: one fresh process per
setting opens the model (one intra-op thread, as each team server worker does: `for_team_server`), embeds `--queries`
short queries (p50, and CPU a query: steadier on a busy machine), then `--long` texts near the
model's 256-token limit in one call (as a write's chunks are), then the queries again. It notes the
process's RSS after each step.

Settings: the arena as onnxruntime sets it up (`arena`, extending by powers of two), the arena
growing only by what is asked (`same-as-requested`), and no arena (`no-arena`: each run's buffers
come from malloc and go back to it). `sbuf --version` is timed in the same run. Results print as
a table and are saved to bench/results/embedding_arena.json with the machine's load average.

    .venv/bin/python bench/embedding_arena.py [--queries 200] [--long 16] [--rounds 3] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import QUERIES  # noqa: E402
from machine import save  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "embedding_arena.json"
DEFAULT_CACHE = Path("/tmp/sbuf-team-server-bench/store-10000/cache/stormbuffer")  # bench/team_server.py's
SETTINGS = ("arena", "same-as-requested", "no-arena")

CHILD = r"""
import json, sys, time
from pathlib import Path
setting, cache, queries, long_count = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
from stormbuffer.embedding import sessions
sessions.for_team_server(forking=True)
plain = sessions._options
def options(*, optimize):
    chosen = plain(optimize=optimize)
    chosen.enable_cpu_mem_arena = setting != "no-arena"
    if setting == "same-as-requested":
        chosen.add_session_config_entry("session.use_env_allocators", "1")
    return chosen
if setting == "same-as-requested":  # an arena of the environment, shared by its sessions, extended by what is asked
    ort = sessions.runtime()
    cpu = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(cpu, ort.OrtArenaCfg(0, 1, -1, -1))
sessions._options = options
from stormbuffer.embedding import load_embedder
def rss():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
embedder = load_embedder(cache)
report = {"opened_rss_mb": rss()}
def timed(prefix):
    times, cpu = [], time.process_time()
    for query in queries:
        began = time.perf_counter()
        embedder.embed([query])
        times.append(time.perf_counter() - began)
    report[prefix + "_cpu_ms"] = (time.process_time() - cpu) / len(queries) * 1000
    report[prefix + "_p50_ms"] = sorted(times)[len(times) // 2] * 1000
timed("query")
report["after_queries_rss_mb"] = rss()
words = "the release pipeline checks the magnetar before tuesday deploys and rolls back on failure ".split()
text = " ".join(words[i % len(words)] for i in range(200))
embedder.embed([f"{n} {text}" for n in range(long_count)])
report["after_long_rss_mb"] = rss()
timed("query_after_long")
report["end_rss_mb"] = rss()
print(json.dumps(report))
"""


def run(setting: str, cache: Path, queries: list[str], long_count: int) -> dict[str, float]:
    """One fresh process's figures for `setting`."""
    done = subprocess.run([sys.executable, "-c", CHILD, setting, str(cache), json.dumps(queries), str(long_count)],
                          capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    return {name: round(value, 2) for name, value in json.loads(done.stdout).items()}


def version_s() -> float:
    """The median seconds of `sbuf --version`, five runs."""
    sbuf = Path(sys.executable).with_name("sbuf")
    times = []
    for _ in range(5):
        began = time.perf_counter()
        subprocess.run([str(sbuf), "--version"], capture_output=True, check=True, timeout=60)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def alternating(settings: Sequence[str], rounds: int, run: Callable[[str], dict[str, float]]
                ) -> dict[str, dict[str, float]]:  # fmt: skip
    """Each setting's medians of `run(setting)` over `rounds` rounds, the settings taken in turn (in
    reverse every other round)."""
    runs: dict[str, list[dict[str, float]]] = {setting: [] for setting in settings}
    for number in range(rounds):
        for setting in settings if number % 2 == 0 else reversed(settings):
            runs[setting].append(run(setting))
            print(f"round {number + 1}/{rounds} {setting}: {runs[setting][-1]}", file=sys.stderr)
    return {setting: {name: statistics.median(one[name] for one in measured) for name in measured[0]}
            for setting, measured in runs.items()}  # fmt: skip


def prepared(options: argparse.Namespace) -> tuple[list[str], float]:
    """`--queries` queries and `sbuf --version`'s time, once the model cache of `--cache-dir` is found."""
    if not (options.cache_dir / "models").is_dir():
        raise SystemExit(f"no model cache at {options.cache_dir}: run bench/team_server.py first, or pass --cache-dir")
    return [QUERIES[n % len(QUERIES)] for n in range(options.queries)], version_s()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--long", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    options = parser.parse_args()
    queries, version = prepared(options)
    found = alternating(
        SETTINGS, options.rounds, lambda setting: run(setting, options.cache_dir, queries, options.long)
    )
    report: dict[str, Any] = {"queries": options.queries, "long_texts": options.long, "version_s": round(version, 4)}
    print(f"sbuf --version: {version * 1000:.1f} ms; medians of {options.rounds} processes each")
    for setting, medians in found.items():
        report[setting] = medians | {"query_p50_x_version": round(medians["query_p50_ms"] / 1000 / version, 4)}
        print(f"{setting:>18}: query p50 {medians['query_p50_ms']:.2f} ms ({medians['query_cpu_ms']:.2f} ms CPU), "
              f"after long texts {medians['query_after_long_p50_ms']:.2f} ms ({medians['query_after_long_cpu_ms']:.2f}"
              f" ms CPU); RSS opened {medians['opened_rss_mb']:.0f} MB, "
              f"after queries {medians['after_queries_rss_mb']:.0f} MB, after long texts "
              f"{medians['after_long_rss_mb']:.0f} MB, at the end {medians['end_rss_mb']:.0f} MB")  # fmt: skip
    save(RESULTS, report)


if __name__ == "__main__":
    main()

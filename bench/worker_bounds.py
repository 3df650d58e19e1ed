"""What a team server worker's memory bounds (`worker_memory.bound_memory`) cost the model's work, and
what they save: one fresh process per setting opens the model as a worker does
(`sessions.for_team_server(forking=True)`: one intra-op thread, no arena, a write's embedding on the writer thread),
then embeds `--writes` times the `--long` texts near the model's 256-token limit of one write
(one call, as a write's chunks are), each time on a new thread as the server's writes come on whichever
thread is free, with `--queries` short queries after each write. It reports the CPU and wall time of a
write's embedding, a query's p50 and CPU, and the process's RSS at the end.

Settings: `plain` (glibc as it comes), `bounded` (`bound_memory()` called first, as in a worker) and
`mapped` (the same with every block of 256 KiB or more mapped on its own and unmapped when freed:
glibc's `MALLOC_MMAP_THRESHOLD_=262144`). A setting prefixed `baseline-` runs on the source tree
`--baseline` names instead (another version's `src`, to compare with). Processes alternate between
the settings for `--rounds` rounds; medians are reported. `sbuf --version` is timed in the same run.
Results print and are saved to bench/results/worker_bounds.json with the machine's load average.

    .venv/bin/python bench/worker_bounds.py [--writes 8] [--long 16] [--queries 20] [--rounds 3]
                                            [--settings plain,bounded] [--baseline SRC] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from embedding_arena import DEFAULT_CACHE, alternating, prepared  # noqa: E402
from machine import save  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "worker_bounds.json"
SETTINGS = ("plain", "bounded", "mapped")
MAPPED = {"MALLOC_MMAP_THRESHOLD_": str(256 << 10)}  # glibc's own setting, read at the process's start

CHILD = r"""
import json, sys, threading, time
from pathlib import Path
setting, cache, queries = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
writes, long_count = int(sys.argv[4]), int(sys.argv[5])
from stormbuffer.adapters.http.worker_memory import bound_memory
from stormbuffer.embedding import load_embedder, sessions
sessions.for_team_server(forking=True)
if setting != "plain":
    bound_memory()
embedder = load_embedder(cache)
words = "the release pipeline checks the magnetar before tuesday deploys and rolls back on failure ".split()
text = " ".join(words[i % len(words)] for i in range(200))
write_cpu, write_wall, query_cpu, query_wall = [], [], [], []
def write(number):
    began, cpu = time.perf_counter(), time.process_time()
    embedder.embed([f"{number} {n} {text}" for n in range(long_count)])
    write_cpu.append(time.process_time() - cpu)
    write_wall.append(time.perf_counter() - began)
for number in range(writes):
    thread = threading.Thread(target=write, args=(number,))
    thread.start()
    thread.join()
    for query in queries:
        began, cpu = time.perf_counter(), time.process_time()
        embedder.embed([query])
        query_wall.append(time.perf_counter() - began)
        query_cpu.append(time.process_time() - cpu)
rss = next(int(line.split()[1]) / 1024 for line in Path("/proc/self/status").read_text().splitlines()
           if line.startswith("VmRSS:"))
median = lambda values: sorted(values)[len(values) // 2] * 1000
print(json.dumps({"write_cpu_ms": median(write_cpu), "write_wall_ms": median(write_wall),
                  "query_cpu_ms": median(query_cpu), "query_p50_ms": median(query_wall), "end_rss_mb": rss}))
"""


def run(setting: str, cache: Path, queries: list[str], writes: int, long_count: int, baseline: Path | None
        ) -> dict[str, float]:  # fmt: skip
    """One fresh process's figures for `setting` (`baseline-…`: on the source tree `baseline`)."""
    env = dict(os.environ)
    if setting.startswith("baseline-"):
        if baseline is None:
            raise SystemExit(f"{setting} needs --baseline SRC")
        env["PYTHONPATH"] = str(baseline)
    if setting.endswith("mapped"):
        env |= MAPPED
    done = subprocess.run([sys.executable, "-c", CHILD, setting.removeprefix("baseline-"), str(cache),
                           json.dumps(queries), str(writes), str(long_count)], capture_output=True, text=True,
                          timeout=300, check=True, env=env)  # fmt: skip
    return {name: round(value, 2) for name, value in json.loads(done.stdout).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=8)
    parser.add_argument("--long", type=int, default=16)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settings", default="plain,bounded", help=f"comma-separated, of {', '.join(SETTINGS)}")
    parser.add_argument("--baseline", type=Path, help="the source tree (`src`) the `baseline-` settings run on")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    options = parser.parse_args()
    settings = options.settings.split(",")
    if unknown := [one for one in settings if one.removeprefix("baseline-") not in SETTINGS]:
        raise SystemExit(f"unknown settings: {', '.join(unknown)}")
    queries, version = prepared(options)

    def measured(setting: str) -> dict[str, float]:
        return run(setting, options.cache_dir, queries, options.writes, options.long, options.baseline)

    found = alternating(settings, options.rounds, measured)
    report: dict[str, Any] = {"writes": options.writes, "long_texts": options.long, "queries": options.queries,
                              "version_s": round(version, 4), "baseline": bool(options.baseline)}  # fmt: skip
    print(f"sbuf --version: {version * 1000:.1f} ms; medians of {options.rounds} processes each")
    for setting, medians in found.items():
        report[setting] = medians | {"query_p50_x_version": round(medians["query_p50_ms"] / 1000 / version, 4)}
        print(f"{setting:>15}: a write's embedding {medians['write_wall_ms']:.0f} ms ({medians['write_cpu_ms']:.0f} ms "
              f"CPU); query p50 {medians['query_p50_ms']:.2f} ms ({medians['query_cpu_ms']:.2f} ms CPU); RSS at the "
              f"end {medians['end_rss_mb']:.0f} MB")  # fmt: skip
    save(RESULTS, report)


if __name__ == "__main__":
    main()

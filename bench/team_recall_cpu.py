"""The team server's CPU per remote `memory_recall`: process CPU time over recalls answered, which a
busy machine's load disturbs far less than latency does. A `sbuf --project serve --team` on the
store bench/team_server.py uses serves `--clients` real MCP clients (the SDK's client over
Streamable HTTP at `/mcp`, each with its own token) that each send `--calls` recalls, paced (`--think`
seconds between) or, with `--think 0`, back to back. The server's CPU is read from /proc before and
after the load (warm-up recalls left out).

With `--baseline SRC` (the `src` directory of another checkout, such as `git archive main src`
unpacked), the server runs from that source tree and from this one in turns, `--rounds` times each,
so the two are compared under the same load on the same machine: a paired before and after.
`--profile DIR` records each run's server with py-spy (when installed) as collapsed stacks (`--format raw`).
`sbuf --version` is timed in the same run. Results print and are saved to
bench/results/team_recall_cpu.json with the machine's load average.

With `--fresh-queries` every query text is new to the server (the same words with a unique tail of
whitespace), so no recent query's vector is reused: the cost of a recall that must embed its query
(saved to team_recall_cpu_fresh.json).

    .venv/bin/python bench/team_recall_cpu.py [--baseline SRC] [--rounds 3] [--clients 64] [--calls 20]
                                              [--think 1.0] [--records 10000] [--work DIR] [--profile DIR]
                                              [--fresh-queries]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import save  # noqa: E402
from team_server import Phase, TeamServer, fresh_store, many, quantile  # noqa: E402

from stormbuffer.auth import Role  # noqa: E402
from stormbuffer.auth.tokens import TeamTokens  # noqa: E402
from stormbuffer.core.stores import record_scope  # noqa: E402
from tests.helpers import Sandbox  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "team_recall_cpu.json"  # with --fresh-queries: _fresh.json
HERE = Path(__file__).resolve().parents[1] / "src"
RUN_BUDGET_S = 120.0  # each run's load stops here whatever --calls says
WARM_CALLS = 2


def run_once(box: Sandbox, source: Path, tokens: list[str], calls: int, think: float,
             profile: Path | None, fresh: bool) -> dict[str, Any]:  # fmt: skip
    """One server from `source`: warmed up by every client, then loaded; its CPU per recall."""
    env = {**box.env, "PYTHONPATH": str(source)}
    server = TeamServer(Sandbox(box.base, env, box.cwd))
    spy = None
    try:
        asyncio.run(many(server.url, tokens, RUN_BUDGET_S, WARM_CALLS, 0.0, fresh))
        if profile is not None and shutil.which("py-spy"):
            spy = subprocess.Popen(["py-spy", "record", "--pid", str(server.process.pid), "--rate", "200",
                                    "--output", str(profile), "--format", "raw", "--nonblocking"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            time.sleep(1.0)
        began, cpu = time.monotonic(), server.cpu_s()
        phase: Phase = asyncio.run(many(server.url, tokens, RUN_BUDGET_S, calls, think, fresh))
        used, wall = server.cpu_s() - cpu, time.monotonic() - began
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        server.stop()
    return {
        "recalls": phase.answered,
        "cpu_ms_a_recall": round(used / phase.answered * 1000, 2),
        "server_cores": round(used / wall, 2),
        "p50_ms": round(statistics.median(phase.times) * 1000, 1),
        "p99_ms": round(quantile(phase.times, 99) * 1000, 1),
        "load_average": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="the src directory of the checkout to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--think", type=float, default=1.0)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sbuf-team-server-bench"))
    parser.add_argument("--profile", type=Path, help="a directory for py-spy stacks of each run")
    parser.add_argument("--fresh-queries", action="store_true",
                        help="make every query text new to the server (no recent query vector to reuse)")  # fmt: skip
    options = parser.parse_args()
    if options.baseline is not None and not (options.baseline / "stormbuffer").is_dir():
        raise SystemExit(f"--baseline must be a source directory holding the stormbuffer package: {options.baseline}")
    paths, box, version = fresh_store(options.work, options.records)
    team = TeamTokens(paths)
    tokens = [team.create(f"client-{n}", Role.AGENT, (record_scope(paths),), None) for n in range(options.clients)]
    trees = {"this": HERE, **({"baseline": options.baseline.resolve()} if options.baseline else {})}
    if options.profile is not None:
        options.profile.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for number in range(options.rounds):
        for name, source in trees.items() if number % 2 == 0 else reversed(trees.items()):
            stacks = options.profile / f"{name}-{number}.txt" if options.profile is not None else None
            print(f"round {number + 1}/{options.rounds}: {name} ...", file=sys.stderr)
            run = run_once(box, source, tokens, options.calls, options.think, stacks, options.fresh_queries)
            runs[name].append(run)
            print(f"  {runs[name][-1]}", file=sys.stderr)
    report: dict[str, Any] = {"records": options.records, "clients": options.clients, "calls": options.calls,
                              "think_s": options.think, "fresh_queries": options.fresh_queries,
                              "version_s": round(version, 4), "runs": runs}  # fmt: skip
    print(f"sbuf --version: {version * 1000:.1f} ms; {options.clients} clients × {options.calls} recalls, "
          f"think {options.think} s{', every query new' if options.fresh_queries else ''}")  # fmt: skip
    for name, measured in runs.items():
        cpu = statistics.median(run["cpu_ms_a_recall"] for run in measured)
        report[f"{name}_cpu_ms_a_recall"] = cpu
        report[f"{name}_cpu_a_recall_x_version"] = round(cpu / 1000 / version, 3)
        p99 = statistics.median(run["p99_ms"] for run in measured)
        print(f"{name:>9}: {cpu:6.2f} ms CPU a recall (median of {len(measured)} runs; "
              f"{cpu / 1000 / version:.3f} × --version), p99 {p99:.0f} ms")  # fmt: skip
    save(RESULTS.with_name("team_recall_cpu_fresh.json") if options.fresh_queries else RESULTS, report)


if __name__ == "__main__":
    main()

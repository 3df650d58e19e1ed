"""A team server (`sbuf --project serve --team`) on a store of `--records` records, driven over
loopback HTTP by real MCP clients (the SDK's client over Streamable HTTP at `/mcp`), each sending a
team token of its own. Measures:

- `sbuf --version` (the machine's floor, timed in the same run: compare ratios across runs);
- one client: `memory_recall` p50 and p95 (hybrid, budget 512), and beside it the same recall
  through `POST /v1/invoke/context` of the same server (what the MCP door adds);
- `--clients` concurrent clients for `--seconds` (each call bounded by `--calls` per client): the
  p50 and p99 of every recall, the throughput and the server's CPU (cores used, CPU a recall:
  what the machine's load leaves aside), in two runs: *paced* (each client recalls,
  then thinks `--think` seconds, as agents that recall before each prompt do) and *saturated* (no
  think time: every client calls again the moment it is answered, so latency is mostly queueing);
- the server's resident memory (its process and any children) after the load, and the peak;
- a token check in process (`Credentials.principal` with the store's 100 tokens), p50.

Targets: one client's recall p50 <= 25 ms; with 64 paced clients p99 <= 300 ms; server RSS <= 400
MB; a token check <= 1 ms p50. The store is the one bench/invoke_latency.py builds (bench/corpus.py
records; vectors from the labelled fast path of bench/scale.py: the real model's identity and
per-query work, recall quality meaningless), reused when present. Results print as a table and are
saved to bench/results/team_server.json (with `--workers N` above 1, team_server_workers<N>.json)
with the machine's load average. `--workers N` serves from N processes (`sbuf serve --workers`);
CPU and memory are then those of every process of the server. The clients repeat 16 queries in turn;
with `--fresh-queries` every query of the many-client phases is new to the server (same words, so the
same retrieval, but never a kept query vector), saved with a `_fresh` suffix.

    .venv/bin/python bench/team_server.py [--records 10000] [--clients 64] [--seconds 45] [--think 1.0]
                                          [--calls 2000] [--recalls 200] [--workers 1] [--work DIR]
                                          [--fresh-queries]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx2  # noqa: E402
from corpus import QUERIES  # noqa: E402
from invoke_latency import build, environment, timed_run  # noqa: E402
from local_auth import LISTENING  # noqa: E402
from machine import result_rows, save  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from team_auth import in_process, recall_timings  # noqa: E402

from stormbuffer.auth import Role  # noqa: E402
from stormbuffer.auth.tokens import TeamTokens  # noqa: E402
from stormbuffer.core.stores import StorePaths, record_scope  # noqa: E402
from tests.helpers import SBUF, Sandbox  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "team_server.json"
TARGETS = {"one_client_recall_p50": 0.025, "paced_recall_p99": 0.300, "team_token_check_p50": 0.001}
MEMORY_TARGET_MB = 400  # the sum of the server's processes' PSS
BUDGET = 512
WARM_CALLS = 5


class TeamServer:
    """`sbuf --project serve --team --port 0 --workers N` in the benchmark's store, its log drained."""

    def __init__(self, box: Sandbox, workers: int = 1) -> None:
        command = [str(SBUF), "--project", "serve", "--port", "0", "--team", "--workers", str(workers)]
        self.process = subprocess.Popen(command, cwd=box.cwd,
                                        env=box.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert self.process.stderr is not None
        address = next(found.group(1) for line in self.process.stderr if (found := LISTENING.search(line)))
        threading.Thread(target=self.process.stderr.read, daemon=True).start()  # one log line per request
        self.base_url = f"http://{address}"
        self.url = f"{self.base_url}/mcp"

    def memory_mb(self) -> dict[str, Any]:
        """The server's memory now, over its processes: the sum of their PSS (shared pages counted
        once, split between the processes sharing them: what the server costs the machine), the sum
        of their RSS and of their peaks (shared pages counted in every process), and each process's
        RSS and PSS."""
        processes = []
        for pid in _tree(self.process.pid):
            status, rollup = _kb_fields(f"/proc/{pid}/status"), _kb_fields(f"/proc/{pid}/smaps_rollup")
            processes.append({"pid": pid, "rss_mb": round(status.get("VmRSS", 0) / 1024, 1),
                              "pss_mb": round(rollup.get("Pss", 0) / 1024, 1),
                              "peak_rss_mb": round(status.get("VmHWM", 0) / 1024, 1)})  # fmt: skip
        return {"pss_mb": round(sum(p["pss_mb"] for p in processes), 1),
                "rss_mb": round(sum(p["rss_mb"] for p in processes), 1),
                "peak_rss_mb": round(sum(p["peak_rss_mb"] for p in processes), 1), "processes": processes}  # fmt: skip

    def connections(self) -> list[int]:
        """How many client connections each process of the server holds now (its main process first)."""
        port = int(self.base_url.rsplit(":", 1)[1])
        established = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":  # ESTABLISHED
                    established.add(fields[9])
        counts = []
        for pid in _tree(self.process.pid):
            held = 0
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    held += target.startswith("socket:[") and target[8:-1] in established
            counts.append(held)
        return counts

    def cpu_s(self) -> float:
        """CPU seconds (user and system) the server and its worker processes have used so far."""
        ticks = 0
        for pid in _tree(self.process.pid):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def print_memory(memory: dict[str, Any]) -> None:
    """`TeamServer.memory_mb`'s figures, summed and per process."""
    print(f"{'server memory':>26}: PSS {memory['pss_mb']:.0f} MB (target <= {MEMORY_TARGET_MB} MB); RSS "
          f"{memory['rss_mb']:.0f} MB now, {memory['peak_rss_mb']:.0f} MB peak, summed over its processes")  # fmt: skip
    for process in memory["processes"]:
        print(f"{'':>26}  pid {process['pid']}: RSS {process['rss_mb']:.0f} MB, PSS {process['pss_mb']:.0f} MB, "
              f"peak RSS {process['peak_rss_mb']:.0f} MB")  # fmt: skip


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        children = (task / "children").read_text().split() if (task / "children").exists() else []
        for child in children:
            found.extend(_tree(int(child)))
    return found


def _kb_fields(path: str) -> dict[str, int]:
    """The kB fields of a /proc file such as /proc/<pid>/status or smaps_rollup."""
    fields = {}
    for line in Path(path).read_text().splitlines():
        name, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            fields[name] = int(value.split()[0])
    return fields


@dataclass
class Phase:
    """The recalls of one phase: the seconds of each measured one, and how many were answered."""

    times: list[float] = field(default_factory=list)
    answered: int = 0


async def recall_client(url: str, token: str, seed: int, until: float, calls: int, think: float,
                        phase: Phase, fresh: bool = False) -> None:  # fmt: skip
    """One SDK client: recalls (the corpus queries in turn) until `until` or `calls`, thinking `think`
    seconds (± half) between, noting each recall's seconds in `phase` (after `WARM_CALLS`
    unmeasured, or with a think time the first). With `fresh`, each query text is new to the server
    (`fresh_query`)."""
    rng = random.Random(seed)
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60, trust_env=False) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        if think:
            await asyncio.sleep(rng.uniform(0, think))  # the clients do not start in step
        for number in range(calls):
            if time.monotonic() >= until:
                return
            query = QUERIES[(seed + number) % len(QUERIES)]
            arguments = {"query": fresh_query(query) if fresh else query, "budget": BUDGET}
            began = time.perf_counter()
            result = await client.call_tool("memory_recall", arguments)
            elapsed = time.perf_counter() - began
            if result.is_error:
                raise SystemExit(f"a recall failed: {str(result.content)[:300]}")
            phase.answered += 1
            if number >= WARM_CALLS or (think and number):
                phase.times.append(elapsed)
            if think:
                await asyncio.sleep(rng.uniform(think / 2, think * 1.5))


async def many(url: str, tokens: list[str], seconds: float, calls: int, think: float, fresh: bool = False) -> Phase:
    """The recalls of one client per token, calling at once."""
    phase = Phase()
    until = time.monotonic() + seconds
    await asyncio.gather(*(recall_client(url, token, n, until, calls, think, phase, fresh)
                           for n, token in enumerate(tokens)))  # fmt: skip
    return phase


def fresh_query(query: str) -> str:
    """`query` made new to the server's recent query vectors, with the same words and the same
    retrieval: a unique tail of spaces and tabs (the query is embedded and matched stripped)."""
    return query + f"{next(_FRESH):b}".replace("0", " ").replace("1", "\t")


_FRESH = itertools.count(1)


def quantile(times: list[float], q: int) -> float:
    """The q-th percentile."""
    return statistics.quantiles(times, n=100, method="inclusive")[q - 1]


def fresh_store(work: Path, records: int) -> tuple[StorePaths, Sandbox, float]:
    """The benchmark's store of `records` under `work` with no tokens or audit trail yet, a sandbox
    to serve it from, and the median seconds of `sbuf --version` there."""
    work = work / f"store-{records}"
    paths = build(work, records)
    shutil.rmtree(paths.root / "team", ignore_errors=True)  # fresh tokens and audit trail every run
    box = Sandbox(work, environment(work, "cache"), work / "project")
    timed_run(["--version"], box.cwd, box.env)
    return paths, box, statistics.median(timed_run(["--version"], box.cwd, box.env)[0] for _ in range(10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--think", type=float, default=1.0)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--recalls", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sbuf-team-server-bench"))
    parser.add_argument("--fresh-queries", action="store_true", help="every many-client query new to the server")
    options = parser.parse_args()
    paths, box, version = fresh_store(options.work, options.records)
    measured, token, _elsewhere = in_process(box)  # 100 tokens in the store; `token` an agent's
    team = TeamTokens(paths)  # and one more for each client: a team server limits each token's rate
    tokens = [team.create(f"client-{n}", Role.AGENT, (record_scope(paths),), None) for n in range(options.clients)]
    print(f"sbuf --version {version * 1000:.1f} ms; token check p50 {measured['team_token_check_p50'] * 1e6:.0f} µs",
          file=sys.stderr)  # fmt: skip
    del measured["audit_append_p50"]
    server = TeamServer(box, options.workers)
    report: dict[str, Any] = {"records": options.records, "clients": options.clients, "seconds": options.seconds,
                              "think_s": options.think, "workers": options.workers,
                              "fresh_queries": options.fresh_queries, "version_s": round(version, 4)}  # fmt: skip
    try:
        print(f"one client: {options.recalls} recalls ...", file=sys.stderr)
        one, api = asyncio.run(recall_timings(server.base_url, token, options.recalls))
        measured["one_client_recall_p50"] = statistics.median(one)
        measured["one_client_recall_p95"] = quantile(one, 95)
        measured["one_client_api_context_p50"] = statistics.median(api)
        for run, think in (("paced", options.think), ("saturated", 0.0)):
            print(f"{run}: {options.clients} clients for {options.seconds:.0f} s ...", file=sys.stderr)
            began, cpu = time.monotonic(), server.cpu_s()
            spread = threading.Timer(options.seconds / 2, lambda run=run: report.update(
                {f"{run}_connections": server.connections()}))  # fmt: skip
            spread.start()
            phase = asyncio.run(many(server.url, tokens, options.seconds, options.calls, think, options.fresh_queries))
            spread.cancel()
            wall = time.monotonic() - began
            report[f"{run}_recalls"] = phase.answered
            report[f"{run}_per_second"] = round(phase.answered / wall, 1)
            report[f"{run}_server_cores"] = round((server.cpu_s() - cpu) / wall, 2)
            report[f"{run}_server_cpu_ms_a_recall"] = round((server.cpu_s() - cpu) / phase.answered * 1000, 1)
            measured[f"{run}_recall_p50"] = statistics.median(phase.times)
            measured[f"{run}_recall_p99"] = quantile(phase.times, 99)
        memory = server.memory_mb()
    finally:
        server.stop()
    report.update(server_memory=memory, server_pss_mb=memory["pss_mb"], memory_target_mb=MEMORY_TARGET_MB,
                  memory_meets_target=memory["pss_mb"] <= MEMORY_TARGET_MB,
                  results=result_rows(measured, TARGETS, version))  # fmt: skip
    print(f"sbuf --version: {version * 1000:.1f} ms; {options.records} records; {options.workers} worker(s)")
    for row in report["results"]:
        seconds = measured[row["name"]]
        print(f"{row['name']:>26}: {seconds * 1000:8.2f} ms  ({seconds / version:6.3f} × --version)  "
              f"meets target: {row['meets_target']}")  # fmt: skip
        row["milliseconds"] = round(seconds * 1000, 3)
    for run in ("paced", "saturated"):
        print(
            f"{run:>26}: {report[f'{run}_recalls']} recalls, {report[f'{run}_per_second']} a second; the server "
            f"used {report[f'{run}_server_cores']} cores, {report[f'{run}_server_cpu_ms_a_recall']} ms CPU a recall"
        )
        print(f"{'':>26}  connections a process (main first) midway: {report.get(f'{run}_connections')}")
    print_memory(memory)
    name = RESULTS.stem + ("" if options.workers == 1 else f"_workers{options.workers}")
    save(RESULTS.with_name(name + ("_fresh" if options.fresh_queries else "") + ".json"), report)


if __name__ == "__main__":
    main()

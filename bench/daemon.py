"""The daemon behind `stormbuffer-mcp` and `sbuf invoke` on a 10,000-record project store.

Measures, with `sbuf --version` timed in the same run (the floor of any process here):

- start → `initialize` → `tools/list` of `stormbuffer-mcp --stdio --project`, the relay spoken to
  over its pipes: with a warm daemon (median of fresh relays) and cold (the daemon stopped before
  each start, so the start includes spawning the daemon and importing the SDK);
- warm `memory_recall` (hybrid, budget 512), p50 and p95, through the daemon and, for comparison,
  through the in-process server (`--no-daemon`): one session each, their calls alternated;
- `sbuf --project invoke context` (hybrid) with a warm daemon (median of fresh processes);
- the resident memory of one relay (its peak, VmHWM) and of the daemon with one session open
  versus eight concurrent sessions (each has made a recall).

Targets: warm start <= 0.15 s, cold start <= 1.0 s, warm recall p50 <= 25 ms and no worse than the
in-process server, warm `invoke context` <= 60 ms, relay <= 25 MB, eight sessions <= 1.2 x one.
The store is bench/invoke_latency.py's (its vectors come from the labelled fast path; recall
quality is meaningless here). Results print as a table and are saved to bench/results/daemon.json
with the machine's load average.

Usage: python bench/daemon.py [--records 10000] [--starts 9] [--recalls 60] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from corpus import QUERIES  # noqa: E402
from invoke_latency import build, environment  # noqa: E402
from machine import machine  # noqa: E402
from mcp_latency import percentile  # noqa: E402

from stormbuffer.daemon import relay

RESULTS = Path(__file__).parent / "results" / "daemon.json"
BIN = Path(sys.executable).parent
TIMEOUT_S = 120.0
INITIALIZE = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
TARGETS = {
    "start_warm_s": 0.15,
    "start_cold_s": 1.0,
    "recall_p50_s": 0.025,
    "invoke_context_warm_s": 0.060,
    "relay_rss_mb": 25.0,
    "eight_sessions_rss_ratio": 1.2,
}


class Session:
    """One `stormbuffer-mcp --stdio --project` process spoken to line by line."""

    def __init__(self, cwd: Path, env: dict[str, str], *flags: str) -> None:
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            [str(BIN / "stormbuffer-mcp"), "--stdio", "--project", *flags], cwd=cwd, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._next = 1

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next, "method": method}
        if params is not None:
            message["params"] = params
        self._next += 1
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self.process.stdout.readline())
        assert "result" in answer, answer
        return answer

    def open(self) -> float:
        """initialize, initialized, tools/list; seconds since the process was spawned."""
        assert self.process.stdin is not None
        self.call("initialize", INITIALIZE)
        self.process.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        listed = self.call("tools/list")
        assert len(listed["result"]["tools"]) == 5
        return time.perf_counter() - self.started

    def recall(self, query: str) -> float:
        began = time.perf_counter()
        answer = self.call("tools/call", {"name": "memory_recall", "arguments": {"query": query, "budget": 512}})
        envelope = answer["result"]["structuredContent"]
        assert envelope["ok"] and envelope["result"]["receipt"]["retrieval_mode"] == "hybrid", envelope
        return time.perf_counter() - began

    def peak_rss_mb(self) -> float:
        return _status_kib(self.process.pid, "VmHWM") / 1024

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=TIMEOUT_S)


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def timed(args: list[str], cwd: Path, env: dict[str, str], stdin: bytes = b"") -> float:
    began = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=env, input=stdin, capture_output=True, timeout=TIMEOUT_S, check=False)
    elapsed = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{args} failed: {done.stdout[:300]!r} {done.stderr[:300]!r}")
    return elapsed


def measure(cwd: Path, env: dict[str, str], starts: int, recalls: int) -> dict[str, float]:
    in_process = {**env, "STORMBUFFER_NO_DAEMON": "1"}
    version = statistics.median(timed([str(BIN / "sbuf"), "--version"], cwd, env) for _ in range(starts))

    cold = []
    for _ in range(starts):
        relay.stop(env)
        session = Session(cwd, env)
        cold.append(session.open())
        session.close()
    print("cold starts done", file=sys.stderr)
    warm, relay_rss = [], []
    for _ in range(starts):
        session = Session(cwd, env)
        warm.append(session.open())
        relay_rss.append(session.peak_rss_mb())
        session.close()

    # Both sessions open, their recalls alternated: the host's load changes for both alike.
    through_daemon, own_process = Session(cwd, env), Session(cwd, in_process, "--no-daemon")
    for session in (through_daemon, own_process):
        session.open()
        session.recall(QUERIES[0])  # opens the model (once per daemon, once per in-process server)
    daemon_recalls, in_process_recalls = [], []
    for index in range(recalls):
        daemon_recalls.append(through_daemon.recall(QUERIES[index % len(QUERIES)]))
        in_process_recalls.append(own_process.recall(QUERIES[index % len(QUERIES)]))
    for session in (through_daemon, own_process):
        session.close()
    print("recalls done", file=sys.stderr)

    def context_request(index: int) -> bytes:
        return json.dumps({"version": 1, "query": QUERIES[index % len(QUERIES)], "budget": 512}).encode()

    invoke = [str(BIN / "sbuf"), "--project", "invoke", "context"]
    context = [timed(invoke, cwd, env, context_request(index)) for index in range(starts)]

    one = Session(cwd, env)
    one.open()
    one.recall(QUERIES[2])
    rss_one = _daemon_rss_kib(env)
    others = []
    for index in range(7):
        session = Session(cwd, env)
        session.open()
        session.recall(QUERIES[index % len(QUERIES)])
        others.append(session)
    rss_eight = _daemon_rss_kib(env)
    for session in [one, *others]:
        session.close()
    relay.stop(env)
    return {
        "version_s": version,
        "start_warm_s": statistics.median(warm),
        "start_cold_s": statistics.median(cold),
        "recall_p50_s": percentile(daemon_recalls, 0.5),
        "recall_p95_s": percentile(daemon_recalls, 0.95),
        "in_process_recall_p50_s": percentile(in_process_recalls, 0.5),
        "invoke_context_warm_s": statistics.median(context),
        "relay_rss_mb": statistics.median(relay_rss),
        "daemon_rss_one_session_mb": rss_one / 1024,
        "daemon_rss_eight_sessions_mb": rss_eight / 1024,
        "eight_sessions_rss_ratio": rss_eight / rss_one,
    }


def _daemon_rss_kib(env: dict[str, str]) -> int:
    status = relay.ask("status", env)
    assert status is not None and status["sessions"] >= 1, status
    return int(status["rss_kib"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--starts", type=int, default=9)
    parser.add_argument("--recalls", type=int, default=60)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sbuf-daemon-bench"))
    options = parser.parse_args()
    work = options.work / f"store-{options.records}"
    paths = build(work, options.records)
    env = {key: value for key, value in environment(work, "cache").items() if key != "STORMBUFFER_NO_DAEMON"}
    measured = measure(paths.root.parent, env, options.starts, options.recalls)
    version = measured["version_s"]
    results = [
        {
            "name": name,
            "value": round(value, 4),
            "per_version": round(value / version, 2) if name.endswith("_s") else None,
            "target": TARGETS.get(name),
            "meets_target": None if name not in TARGETS else value <= TARGETS[name],
        }
        for name, value in measured.items()
    ]
    no_worse = measured["recall_p50_s"] <= measured["in_process_recall_p50_s"]
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "records": options.records,
        "vectors": "FAST PATH: real model identity, vectors reused from really embedded sample chunks",
        "samples": {"starts": options.starts, "recalls": options.recalls},
        "recall_no_worse_than_in_process": no_worse,
        "results": results,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{'measure':<30} {'value':>9} {'/version':>9} {'target':>8}  ok")
    for result in results:
        target = "" if result["target"] is None else f"{result['target']:g}"
        ratio = "" if result["per_version"] is None else f"{result['per_version']:.2f}"
        ok = {True: "yes", False: "NO", None: ""}[result["meets_target"]]
        print(f"{result['name']:<30} {result['value']:>9.4f} {ratio:>9} {target:>8}  {ok}")
    print(f"recall no worse than in-process: {no_worse}; load average: {report['machine']['load_average_at_end']}")
    print(f"saved to {RESULTS}")


if __name__ == "__main__":
    main()

"""Latency of `stormbuffer-mcp` on a 10,000-record project store, through stdio with the official SDK client.

Measures (wall time, as an MCP host sees it):

- start: spawning `stormbuffer-mcp --stdio --project`, `initialize`, then `tools/list` (median of
  fresh processes);
- first `memory_recall` of a fresh process, which includes opening the embedding model (median):
  right after `tools/list`, and after the host stayed quiet for a second (as hosts do between
  starting a server and the first prompt; the adapter prepares its imports meanwhile, never the
  model);
- warm `memory_recall` (hybrid, budget 512) in one long-lived session: p50 and p95 over the query
  set, repeated; warm `memory_get` p50 for reference.

Targets: start <= 1.0 s, first recall <= 0.6 s, warm recall p50 <= 30 ms and p95 <= 80 ms. The
store is the one bench/invoke_latency.py builds (bench/corpus.py records; vectors from the labelled
fast path of bench/scale.py, so per-query work is real and recall quality is meaningless) and is
reused when present. Results print as a table and are saved to bench/results/mcp_latency.json with
the machine's load average.

Usage: python bench/mcp_latency.py [--records 10000] [--starts 9] [--warm-rounds 5] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

sys.path.insert(0, str(Path(__file__).parent))
from corpus import QUERIES  # noqa: E402
from invoke_latency import build, environment  # noqa: E402
from machine import machine, result_rows  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "mcp_latency.json"
ADAPTER = Path(sys.executable).parent / "stormbuffer-mcp"
TARGETS_S = {"start": 1.0, "first_recall": 0.6, "warm_recall_p50": 0.030, "warm_recall_p95": 0.080}

HOST_PAUSE_S = 1.0
Step = Callable[[ClientSession], Awaitable[Any]]


class Adapter:
    """How to start the adapter on the benchmark store."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.params = StdioServerParameters(command=str(ADAPTER), args=["--stdio", "--project"], env=env, cwd=cwd)

    async def fresh(self, after_start: Step | None = None, pause: float = 0.0) -> tuple[float, float | None]:
        """Seconds from spawn to the `tools/list` answer, and of `after_start` in that process (if given),
        which starts `pause` seconds after that answer."""
        started = time.perf_counter()
        async with stdio_client(self.params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            listed = await client.list_tools()
            start = time.perf_counter() - started
            assert len(listed.tools) == 5, listed
            if after_start is None:
                return start, None
            await anyio.sleep(pause)
            began = time.perf_counter()
            await after_start(client)
            return start, time.perf_counter() - began


async def recall(client: ClientSession, query: str) -> dict[str, Any]:
    result = await client.call_tool("memory_recall", {"query": query, "budget": 512})
    envelope: dict[str, Any] = result.structured_content
    assert envelope["ok"] and envelope["result"]["receipt"]["retrieval_mode"] == "hybrid", envelope
    return envelope


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


async def measure(adapter: Adapter, record_id: str, starts: int, warm_rounds: int) -> dict[str, Any]:
    start_times, first_recalls, paused_recalls = [], [], []
    for index in range(starts + 1):  # the first process only warms the page cache
        start, first = await adapter.fresh(lambda client, i=index: recall(client, QUERIES[i % len(QUERIES)]))
        if index:
            start_times.append(start)
            first_recalls.append(first)
    for index in range(starts):
        _start, first = await adapter.fresh(lambda client, i=index: recall(client, QUERIES[i % len(QUERIES)]),
                                            pause=HOST_PAUSE_S)  # fmt: skip
        paused_recalls.append(first)
    warm, gets = [], []
    async with stdio_client(adapter.params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        await recall(client, QUERIES[0])
        for _round in range(warm_rounds):
            for query in QUERIES:
                began = time.perf_counter()
                await recall(client, query)
                warm.append(time.perf_counter() - began)
            began = time.perf_counter()
            answer = await client.call_tool("memory_get", {"id": record_id})
            gets.append(time.perf_counter() - began)
            assert answer.structured_content["ok"], answer
    return {
        "start": statistics.median(start_times),
        "first_recall": statistics.median(value for value in first_recalls if value is not None),
        "first_recall_after_quiet_host": statistics.median(value for value in paused_recalls if value is not None),
        "warm_recall_p50": percentile(warm, 0.5),
        "warm_recall_p95": percentile(warm, 0.95),
        "warm_get_p50": percentile(gets, 0.5),
        "samples": {"starts": starts, "warm_recalls": len(warm), "warm_gets": len(gets)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--starts", type=int, default=9)
    parser.add_argument("--warm-rounds", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sbuf-invoke-bench"))
    options = parser.parse_args()
    work = options.work / f"store-{options.records}"
    paths = build(work, options.records)
    record_id = next(paths.records.glob("*.md")).stem
    adapter = Adapter(paths.root.parent, environment(work, "cache"))
    measured = anyio.run(measure, adapter, record_id, options.starts, options.warm_rounds)
    samples = measured.pop("samples")
    results = result_rows(measured, TARGETS_S)
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "records": options.records,
        "client": "official MCP Python SDK (mcp.client.stdio + ClientSession)",
        "vectors": "FAST PATH: real model identity, vectors reused from really embedded sample chunks",
        "samples": samples,
        "results": results,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{'measure':<30} {'seconds':>9} {'target':>8}  ok")
    for result in results:
        target = "" if result["target_s"] is None else f"{result['target_s']:.3f}"
        ok = {True: "yes", False: "NO", None: ""}[result["meets_target"]]
        print(f"{result['name']:<30} {result['seconds']:>9.4f} {target:>8}  {ok}")
    print(f"samples: {samples}; load average at the end: {report['machine']['load_average_at_end']}")
    print(f"saved to {RESULTS}")


if __name__ == "__main__":
    main()

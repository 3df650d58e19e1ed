"""The local HTTP API (`sbuf --project serve`) on a project store, driven by a real HTTP client over loopback.

Measures:

- `sbuf --version` (the machine's floor, timed in the same run: compare ratios across runs);
- start: spawning `sbuf --project serve` until the first `200` of `POST /v1/invoke/get` for an
  existing record (median of fresh processes; a request whose cost does not grow with the store:
  `GET /v1/records` parses every record file, as `sbuf list` does);
- warm `POST /v1/invoke/context` (hybrid, budget 512) in one server: p50 and p95 over the query
  set, repeated; warm `GET /v1/search` and `POST /v1/invoke/get` p50 for reference;
- load: N concurrent clients mixing reads (context, search, get) and writes (`POST /v1/records`,
  each with a unique title), bounded in time and in requests per client. Every answer is counted
  by status; afterwards every write answered 201 must be on disk, complete (`GET` returns exactly
  what was sent), every write answered 409 `store_busy` must be absent, and every record file must
  parse.

Targets: start <= 1.0 s, warm context p50 <= 20 ms; load: no 5xx, no lost or partial write, every
write applied or answered `store_busy`. The store is the one bench/invoke_latency.py builds
(bench/corpus.py records; vectors from the labelled fast path of bench/scale.py, so per-query
work is real and recall quality is meaningless) and is reused when present; the load test writes
into a copy of it. Results print as a table and are saved to bench/results/http.json with the
machine's load average.

Usage: python bench/http_api.py [--records 10000] [--starts 7] [--warm-rounds 5] [--clients 200]
                            [--seconds 60] [--work DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# This file's name would shadow the standard library's `http` while its directory leads `sys.path`:
# the directory goes to the end, for the benchmark's own modules only.
BENCH = Path(__file__).resolve().parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != BENCH] + [str(BENCH)]

import httpx2  # noqa: E402
from corpus import QUERIES  # noqa: E402
from invoke_latency import build, environment, timed_run  # noqa: E402
from machine import machine, result_rows  # noqa: E402

from stormbuffer.auth.credential import ensure_token  # noqa: E402
from stormbuffer.core.repository import Repository  # noqa: E402
from stormbuffer.core.stores import StorePaths  # noqa: E402

RESULTS = BENCH / "results" / "http.json"
SBUF = Path(sys.executable).parent / "sbuf"
TARGETS_S = {"start_to_first_200": 1.0, "warm_context_p50": 0.020}
JSON = {"Content-Type": "application/json"}
LISTENING = re.compile(r"listening address=(\S+)")
WRITE_SHARE = 0.3
REQUESTS_PER_CLIENT = 2000
SOURCE = {"kind": "conversation", "reference": "bench:http", "actor": "human"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


AUTH: dict[str, str] = {}  # `Authorization` of the benchmark user, set once in main


class Served:
    """One `sbuf --project serve` process on the benchmark store."""

    def __init__(self, cwd: Path, env: dict[str, str], port: int | None = None) -> None:
        self.port = port or free_port()
        self.started = time.perf_counter()
        self.process = subprocess.Popen([str(SBUF), "--project", "serve", "--port", str(self.port)], cwd=cwd, env=env,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"

    def first_200(self, record_id: str, deadline_s: float = 30.0) -> float:
        """Seconds from spawn to the first 200 of `POST /v1/invoke/get` for `record_id`."""
        body = json.dumps({"version": 1, "id": record_id})
        with httpx2.Client(base_url=self.url, headers=AUTH, trust_env=False, timeout=deadline_s) as client:
            while time.perf_counter() - self.started < deadline_s:
                try:
                    if client.post("/v1/invoke/get", content=body, headers=JSON).status_code == 200:
                        return time.perf_counter() - self.started
                except httpx2.TransportError:
                    time.sleep(0.005)
        raise SystemExit("the server did not answer in time")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        if self.process.wait(timeout=30) != 0:
            raise SystemExit(f"the server exited with {self.process.returncode}")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def version_floor(cwd: Path, env: dict[str, str], runs: int) -> float:
    timed_run(["--version"], cwd, env)
    return statistics.median(timed_run(["--version"], cwd, env)[0] for _ in range(runs))


def starts(cwd: Path, env: dict[str, str], record_id: str, count: int) -> float:
    times = []
    for index in range(count + 1):  # the first process only warms the page cache
        served = Served(cwd, env)
        elapsed = served.first_200(record_id)
        served.stop()
        if index:
            times.append(elapsed)
    return statistics.median(times)


def warm(cwd: Path, env: dict[str, str], record_id: str, rounds: int) -> dict[str, float]:
    served = Served(cwd, env)
    served.first_200(record_id)
    contexts, searches, gets = [], [], []
    with httpx2.Client(base_url=served.url, headers=AUTH, trust_env=False, timeout=60) as client:

        def timed(method: str, path: str, **kwargs: Any) -> tuple[float, httpx2.Response]:
            began = time.perf_counter()
            answer = client.request(method, path, **kwargs)
            elapsed = time.perf_counter() - began
            assert answer.status_code == 200, answer.text[:300]
            return elapsed, answer

        def context(query: str) -> float:
            body = json.dumps({"version": 1, "query": query, "budget": 512})
            elapsed, answer = timed("POST", "/v1/invoke/context", content=body, headers=JSON)
            assert answer.json()["result"]["receipt"]["retrieval_mode"] == "hybrid", answer.text[:300]
            return elapsed

        context(QUERIES[0])  # opens the model and the vectors
        for _round in range(rounds):
            for query in QUERIES:
                contexts.append(context(query))
                searches.append(timed("GET", "/v1/search", params={"query": query})[0])
            get = json.dumps({"version": 1, "id": record_id})
            gets.append(timed("POST", "/v1/invoke/get", content=get, headers=JSON)[0])
    served.stop()
    return {
        "warm_context_p50": percentile(contexts, 0.5),
        "warm_context_p95": percentile(contexts, 0.95),
        "warm_search_p50": percentile(searches, 0.5),
        "warm_get_p50": percentile(gets, 0.5),
    }


async def load(url: str, clients: int, seconds: float, record_ids: list[str]) -> dict[str, Any]:
    """`clients` concurrent clients for `seconds` (each at most `REQUESTS_PER_CLIENT` requests); what
    they were answered and what they wrote."""
    statuses: Counter[str] = Counter()
    applied: dict[str, dict[str, Any]] = {}  # record id → the body sent
    busy: list[dict[str, Any]] = []
    busy_seconds: list[float] = []
    unexpected: list[str] = []
    stop_at = time.perf_counter() + seconds
    limits = httpx2.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx2.AsyncClient(base_url=url, headers=AUTH, trust_env=False, timeout=120, limits=limits) as http:

        async def one_client(number: int) -> None:
            rng = random.Random(number)
            sequence = 0
            for _request in range(REQUESTS_PER_CLIENT):
                if time.perf_counter() >= stop_at:
                    break
                if rng.random() < WRITE_SHARE:
                    sequence += 1
                    body = {"title": f"Load client {number} write {sequence}", "kind": "fact", "access": "human",
                            "sources": [SOURCE], "body": f"Written by client {number}, write {sequence}."}  # fmt: skip
                    began = time.perf_counter()
                    answer = await http.post("/v1/records", json=body)
                    statuses[f"write {answer.status_code}"] += 1
                    if answer.status_code == 201:
                        applied[answer.json()["record_id"]] = body
                    elif answer.status_code == 409 and answer.json().get("error", {}).get("code") == "store_busy":
                        busy.append(body)
                        busy_seconds.append(time.perf_counter() - began)
                    else:
                        unexpected.append(f"write {answer.status_code}: {answer.text[:200]}")
                    continue
                choice = rng.random()
                if choice < 0.5:
                    query = rng.choice(QUERIES)
                    answer = await http.post("/v1/invoke/context", json={"version": 1, "query": query})
                elif choice < 0.8:
                    answer = await http.get("/v1/search", params={"query": rng.choice(QUERIES), "limit": 5})
                else:
                    answer = await http.get(f"/v1/records/{rng.choice(record_ids)}")
                statuses[f"read {answer.status_code}"] += 1
                if answer.status_code != 200:
                    unexpected.append(f"read {answer.status_code}: {answer.text[:200]}")

        await asyncio.gather(*(one_client(number) for number in range(clients)))
    return {"statuses": statuses, "applied": applied, "busy": busy, "busy_seconds": busy_seconds,
            "unexpected": unexpected}  # fmt: skip


def check_writes(url: str, store: Repository, outcome: dict[str, Any]) -> dict[str, int]:
    """Lost, partial and phantom writes, after the load."""
    lost = partial = 0
    with httpx2.Client(base_url=url, headers=AUTH, trust_env=False, timeout=60) as client:
        for record_id, body in outcome["applied"].items():
            answer = client.get(f"/v1/records/{record_id}")
            if answer.status_code != 200:
                lost += 1
                continue
            got = answer.json()
            if any(got[key] != body[key] for key in ("title", "kind", "access", "sources", "body")):
                partial += 1
    titles = {item.record.title for item in store.scan_read_only()}  # every file parses, or this raises
    phantom = sum(body["title"] in titles for body in outcome["busy"])
    return {"lost": lost, "partial": partial, "phantom_busy_writes": phantom}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--starts", type=int, default=7)
    parser.add_argument("--warm-rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sbuf-invoke-bench"))
    options = parser.parse_args()
    work = options.work / f"store-{options.records}"
    paths = build(work, options.records)
    env = environment(work, "cache")
    AUTH["Authorization"] = f"Bearer {ensure_token(env)}"  # the credential every server of the run accepts
    cwd = paths.root.parent
    record_ids = sorted(path.stem for path in paths.records.glob("*.md"))[:500]

    print("timing sbuf --version …", file=sys.stderr)
    version = version_floor(cwd, env, 15)
    print(f"starting the server {options.starts + 1} times …", file=sys.stderr)
    start = starts(cwd, env, record_ids[0], options.starts)
    print("warm requests …", file=sys.stderr)
    warmed = warm(cwd, env, record_ids[0], options.warm_rounds)

    print(f"load: {options.clients} clients for {options.seconds:g} s on a copy of the store …", file=sys.stderr)
    copy = options.work / f"load-{options.records}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(paths.root.parent, copy / "project", symlinks=True)
    served = Served(copy / "project", env)
    served.first_200(record_ids[0])
    began = time.perf_counter()
    outcome = asyncio.run(load(served.url, options.clients, options.seconds, record_ids))
    wall = time.perf_counter() - began
    copied = StorePaths("project", copy / "project" / ".sbuf", paths.cache_dir)
    checked = check_writes(served.url, Repository(copied), outcome)
    served.stop()
    statuses = dict(sorted(outcome["statuses"].items()))
    five_hundreds = sum(count for key, count in statuses.items() if key.split()[1].startswith("5"))
    load_report = {
        "clients": options.clients,
        "seconds": options.seconds,
        "wall_s": round(wall, 2),
        "requests": sum(statuses.values()),
        "requests_per_s": round(sum(statuses.values()) / wall, 1),
        "statuses": statuses,
        "writes_applied": len(outcome["applied"]),
        "writes_store_busy": len(outcome["busy"]),
        "store_busy_max_wait_s": round(max(outcome["busy_seconds"], default=0.0), 2),
        "unexpected_answers": outcome["unexpected"][:10],
        "5xx": five_hundreds,
        **checked,
    }
    load_ok = (five_hundreds == 0 and not outcome["unexpected"] and checked["lost"] == 0 and checked["partial"] == 0
               and checked["phantom_busy_writes"] == 0)  # fmt: skip

    measured = {"sbuf_version": version, "start_to_first_200": start, **warmed}
    results = result_rows(measured, TARGETS_S, version)
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "records": options.records,
        "client": "httpx2 over loopback HTTP/1.1 (uvicorn with h11)",
        "vectors": "FAST PATH: real model identity, vectors reused from really embedded sample chunks",
        "results": results,
        "load": {**load_report, "meets_target": load_ok},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{'measure':<24} {'seconds':>9} {'× version':>10} {'target':>8}  ok")
    for result in results:
        target = "" if result["target_s"] is None else f"{result['target_s']:.3f}"
        ok = {True: "yes", False: "NO", None: ""}[result["meets_target"]]
        print(f"{result['name']:<24} {result['seconds']:>9.4f} {result['ratio_to_version']:>10.2f} {target:>8}  {ok}")
    print(f"load: {json.dumps(load_report)}")
    print(f"load meets its target: {'yes' if load_ok else 'NO'}")
    print(f"load average at the end: {report['machine']['load_average_at_end']}; saved to {RESULTS}")


if __name__ == "__main__":
    main()

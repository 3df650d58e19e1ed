"""What the local credential costs `sbuf serve`: the check of one request's credential in process
(bearer token and review-page cookie), and through a real server on an empty store the p50 of an
authenticated `GET /v1/records` beside a refused one (401, no token), with `sbuf --version` timed in
the same run. Target: a credential check adds at most 1 ms at p50.

    .venv/bin/python bench/local_auth.py [--requests 300]
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx2  # noqa: E402
from invoke_latency import timed_run  # noqa: E402
from machine import machine, result_rows  # noqa: E402

from stormbuffer.adapters.http.access import Credentials  # noqa: E402
from tests.helpers import SBUF, Sandbox  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "local_auth.json"
TARGETS = {"bearer_check_p50": 0.001, "cookie_check_p50": 0.001}
LISTENING = re.compile(r"listening address=(\S+)")


def check_cost(kind: str, rounds: int = 5, per_round: int = 20_000) -> float:
    """Seconds per `Credentials.principal` call, the median of `rounds` rounds."""
    credentials = Credentials(secrets.token_urlsafe(32))
    header = (b"authorization", f"Bearer {credentials.token}".encode()) if kind == "bearer" else (
        b"cookie", f"{credentials.cookie_name(7342)}={credentials.session}".encode())  # fmt: skip
    scope = {"type": "http", "path": "/v1/records" if kind == "bearer" else "/", "server": ("127.0.0.1", 7342),
             "headers": [(b"host", b"127.0.0.1:7342"), header]}  # fmt: skip
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(per_round):
            assert credentials.principal(scope) is not None
        times.append((time.perf_counter() - began) / per_round)
    return statistics.median(times)


def served_p50s(requests: int) -> dict[str, float]:
    """p50 seconds of an authenticated and of a refused `GET /v1/records` on one real server."""
    with tempfile.TemporaryDirectory() as base:
        box = Sandbox.create(Path(base))
        assert box.sbuf("--project", "init").returncode == 0
        token = box.sbuf("auth", "token").stdout.strip()
        return p50s_through(box, [], requests, {
            "authenticated_get_records": ("/v1/records", {"Authorization": f"Bearer {token}"}, 200),
            "refused_get_records": ("/v1/records", {}, 401),
        })  # fmt: skip


def p50s_through(
    box: Sandbox, serve_args: list[str], requests: int, cases: dict[str, tuple[str, dict[str, str], int]]
) -> dict[str, float]:
    """p50 seconds (`<case>_p50`) of each case's `GET path` with its headers, which must be answered
    with its status, the cases taken in turn, through a real `sbuf --project serve <serve_args>` in `box`."""
    process = subprocess.Popen([str(SBUF), "--project", "serve", "--port", "0", *serve_args], cwd=box.cwd,
                               env=box.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    timings: dict[str, list[float]] = {name: [] for name in cases}
    try:
        assert process.stderr is not None
        address = next(found.group(1) for line in process.stderr if (found := LISTENING.search(line)))
        threading.Thread(target=process.stderr.read, daemon=True).start()  # one log line per request
        with httpx2.Client(base_url=f"http://{address}", trust_env=False, timeout=30) as client:
            for _ in range(requests):
                for name, (path, headers, expected) in cases.items():
                    began = time.perf_counter()
                    status = client.get(path, headers=headers).status_code
                    timings[name].append(time.perf_counter() - began)
                    assert status == expected, (name, status)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return {f"{name}_p50": statistics.median(values) for name, values in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as base:
        box = Sandbox.create(Path(base))
        timed_run(["--version"], box.cwd, box.env)
        version = statistics.median(timed_run(["--version"], box.cwd, box.env)[0] for _ in range(10))
    measured = {"bearer_check_p50": check_cost("bearer"), "cookie_check_p50": check_cost("cookie"),
                **served_p50s(options.requests)}  # fmt: skip
    rows = result_rows(measured, TARGETS, version)
    print(f"sbuf --version: {version * 1000:.1f} ms")
    for row in rows:
        seconds = measured[row["name"]]
        print(
            f"{row['name']:>32}: {seconds * 1e6:9.1f} µs  ({seconds / version:.4f} × --version)  "
            f"meets target: {row['meets_target']}"
        )
        row["microseconds"] = round(seconds * 1e6, 1)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"when": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
                                   "version_s": round(version, 4), "requests": options.requests, "results": rows},
                                  indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()

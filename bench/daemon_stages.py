"""Where the daemon's time goes for one prompt hook's `context` request, stage by stage.

The daemon runs in this process (its real `Daemon.serve` on a private runtime directory) over the
10,000-record store bench/invoke_latency.py builds; a client thread sends what the Node.js hook
sends (the hello and the payload in one write) and reads the answer to its end. Probes around
the daemon's own functions stamp each stage: the hello and the payload read (a thread hop each),
the hop to the store worker, resolving the session, the answer (parsing, retrieval, envelope),
the reply. The client shares this process's interpreter, so sub-millisecond stages are indicative;
`less_store_work` (the whole request less the session and the answer) is what the daemon adds to
retrieval. `sbuf --version` is timed before and after as the machine's floor.
Results print and are saved to bench/results/daemon_stages.json.

Usage: python bench/daemon_stages.py [--records 10000] [--requests 80] [--work DIR]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).parent))
from corpus import QUERIES  # noqa: E402
from invoke_latency import build  # noqa: E402
from machine import machine  # noqa: E402

from stormbuffer.daemon import server  # noqa: E402
from stormbuffer.daemon.runtime import PROTOCOL, Runtime  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "daemon_stages.json"
SBUF = Path(sys.executable).parent / "sbuf"
WARM_REQUESTS = 6
# stage name -> (from stamp, to stamp)
STAGES = {
    "hello_read": ("sent", "hello_read"),
    "payload_read": ("payload_asked", "payload_read"),
    "hop_to_worker": ("payload_read", "worker_start"),
    "session": ("worker_start", "session_resolved"),
    "answer": ("session_resolved", "answered"),
    "hop_back_and_reply": ("answered", "reply_sent"),
    "client_read": ("reply_sent", "client_done"),
    "whole_request": ("sent", "client_done"),
}


Mark = str | Callable[[tuple[Any, ...], dict[str, Any]], str]  # a stage mark, or one named by the call


class Stamps:
    """The first time each stage mark was reached in the current request."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}

    def mark(self, name: Mark, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.marks.setdefault(name if isinstance(name, str) else name(args, kwargs), time.perf_counter())

    def around(self, owner: Any, name: str, before: Mark | None, after: Mark) -> None:
        """Wrap `owner.name` (a function or a coroutine function) to mark `before` and `after` it."""
        original = getattr(owner, name)
        if inspect.iscoroutinefunction(original):

            async def probe_async(*args: Any, **kwargs: Any) -> Any:
                if before is not None:
                    self.mark(before, args, kwargs)
                result = await original(*args, **kwargs)
                self.mark(after, args, kwargs)
                return result

            setattr(owner, name, probe_async)
            return

        def probe(*args: Any, **kwargs: Any) -> Any:
            if before is not None:
                self.mark(before, args, kwargs)
            result = original(*args, **kwargs)
            self.mark(after, args, kwargs)
            return result

        setattr(owner, name, probe)


def _read_kind(_args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    return "hello" if kwargs.get("line") else "payload"


def probe_daemon(stamps: Stamps) -> None:
    """Stamp the daemon's stages through its own functions."""
    import stormbuffer.protocol.invoke as invoke

    stamps.around(server.Connection, "read", lambda a, kw: f"{_read_kind(a, kw)}_asked",
                  lambda a, kw: f"{_read_kind(a, kw)}_read")  # fmt: skip
    stamps.around(server.Shared, "session", "worker_start", "session_resolved")
    stamps.around(invoke, "invoke_line", None, "answered")
    stamps.around(server.Connection, "reply", None, lambda a, _kw: "reply_sent" if "line" in a[1] else "accepted")


def ask(
    place: Runtime, install: str, project: Path, env: dict[str, str], index: int, stamps: Stamps
) -> dict[str, float]:
    """One hook-shaped `context` request; the stamps of its stages."""
    payload = (json.dumps({"version": 1, "query": QUERIES[index % len(QUERIES)], "budget": 512}) + "\n").encode()
    hello = {"protocol": PROTOCOL, "install": install, "door": "invoke", "cwd": str(project), "env": env,
             "operation": "context", "view": "project", "length": len(payload)}  # fmt: skip
    stamps.marks.clear()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(os.fspath(place.socket))
        time.sleep(0.002)  # the daemon is waiting for the hello, as for a hook's
        stamps.marks["sent"] = time.perf_counter()
        sock.sendall(json.dumps(hello).encode() + b"\n" + payload)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        stamps.marks["client_done"] = time.perf_counter()
    if b"receipt_id" not in answer:
        raise SystemExit(f"no context in the answer: {answer[:300]!r}")
    return dict(stamps.marks)


def version_ms(runs: int = 10) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([str(SBUF), "--version"], capture_output=True, check=True)
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[round(0.95 * (len(ordered) - 1))]
    return {"p50_ms": round(statistics.median(ordered), 2), "p95_ms": round(p95, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=80)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sbuf-invoke-bench"))
    options = parser.parse_args()
    work = options.work / f"store-{options.records}"
    project = build(work, options.records).root.parent
    env = {"HOME": str(work / "home"), "XDG_DATA_HOME": str(work / "data"), "XDG_CACHE_HOME": str(work / "cache")}
    floor_before = version_ms()
    stamps = Stamps()
    probe_daemon(stamps)
    with tempfile.TemporaryDirectory() as directory:
        place = Runtime(Path(directory))
        daemon = server.Daemon(place, os.environ)
        if not daemon.claim():
            raise SystemExit("could not claim the private runtime directory")
        rows: list[dict[str, float]] = []

        def client() -> None:
            try:
                for index in range(-WARM_REQUESTS, options.requests):
                    found = ask(place, daemon.identity, project, env, index, stamps)
                    if index >= 0:
                        rows.append(found)
                    print(f"\r  {index + 1}/{options.requests}", end="", file=sys.stderr, flush=True)
                print(file=sys.stderr)
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # the daemon's own way to stop

        threading.Thread(target=client, daemon=True).start()
        anyio.run(daemon.serve)
    if len(rows) != options.requests:
        raise SystemExit("the client stopped early")
    stages = {name: summary([(row[end] - row[start]) * 1000 for row in rows]) for name, (start, end) in STAGES.items()}
    stages["less_store_work"] = summary(
        [(row["client_done"] - row["sent"] - (row["answered"] - row["worker_start"])) * 1000 for row in rows]
    )
    floor = statistics.mean([floor_before, version_ms()])
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "records": options.records,
        "requests": options.requests,
        "sbuf_version_p50_ms": round(floor, 1),
        "stages": stages,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{'stage':<20} {'p50 ms':>8} {'p95 ms':>8}")
    for name, result in stages.items():
        print(f"{name:<20} {result['p50_ms']:>8.2f} {result['p95_ms']:>8.2f}")
    whole = stages["whole_request"]["p50_ms"]
    print(f"sbuf --version p50 {floor:.1f} ms; whole request ÷ --version {whole / floor:.2f}")
    print(f"load average at the end: {report['machine']['load_average_at_end']}; saved to {RESULTS}")


if __name__ == "__main__":
    main()

"""Memory of `stormbuffer-mcp` while it refuses oversized messages: one line of 20 MB and one of
100 MB, each a `tools/call` whose id comes first, followed by a `ping`.

Reports the adapter's resident set (VmRSS) after `initialize`, after each oversized line was
answered, and its peak (VmHWM), in MiB; the target is that neither line raises the resident set by
more than 16 MiB (one message is bounded to 4 MiB and skipped as it arrives). The wall time of
each refusal sits beside the median time of `sbuf --version` in the same run, as a ratio, because
the machine is shared. Runs in a temporary global store; results print and are saved to
bench/results/mcp_message_bound.json.

Usage: python bench/mcp_message_bound.py [--sizes-mb 20 100]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from machine import machine  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "mcp_message_bound.json"
BIN = Path(sys.executable).parent
TARGET_GROWTH_MIB = 16
INITIALIZE = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}


def memory_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not reported")


def send(process: subprocess.Popen[bytes], message: dict[str, object] | bytes) -> dict[str, object]:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n")
    process.stdin.flush()
    answer: dict[str, object] = json.loads(process.stdout.readline())
    return answer


def version_median_s(runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([str(BIN / "sbuf"), "--version"], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[20, 100])
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="stormbuffer-bound-"))
    env = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(home / "data")}
    subprocess.run([str(BIN / "sbuf"), "init"], env=env, check=True, capture_output=True)
    process = subprocess.Popen([str(BIN / "stormbuffer-mcp"), "--stdio"], env=env, cwd=home,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
    send(process, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE})
    baseline = memory_mib(process.pid, "VmRSS:")
    version_s = version_median_s()
    rows = []
    for number, size in enumerate(args.sizes_mb, start=2):
        head = f'{{"jsonrpc":"2.0","id":{number},"method":"tools/call","params":{{"name":"memory_recall",'
        line = (head + '"arguments":{"query":"').encode() + b"a" * (size * 1_000_000) + b'"}}}\n'
        started = time.perf_counter()
        answer = send(process, line)
        elapsed = time.perf_counter() - started
        assert answer.get("id") == number and "error" in answer, answer
        assert send(process, {"jsonrpc": "2.0", "id": 100 + number, "method": "ping"}).get("result") == {}
        rss = memory_mib(process.pid, "VmRSS:")
        row = {"line_mb": size, "rss_after_mib": round(rss, 1), "growth_mib": round(rss - baseline, 1)}
        rows.append({**row, "refusal_s": round(elapsed, 3), "refusal_over_version": round(elapsed / version_s, 1)})
    peak = memory_mib(process.pid, "VmHWM:")
    assert process.stdin is not None
    process.stdin.close()
    process.wait(timeout=60)
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "baseline_rss_mib": round(baseline, 1),
        "peak_rss_mib": round(peak, 1),
        "sbuf_version_s": round(version_s, 4),
        "target_growth_mib": TARGET_GROWTH_MIB,
        "lines": rows,
        "met": all(row["growth_mib"] <= TARGET_GROWTH_MIB for row in rows) and peak - baseline <= TARGET_GROWTH_MIB,
    }
    print(f"baseline RSS {report['baseline_rss_mib']} MiB, peak {report['peak_rss_mib']} MiB; "
          f"sbuf --version {version_s * 1000:.0f} ms")  # fmt: skip
    for row in rows:
        print(f"{row['line_mb']:>4} MB line: RSS after {row['rss_after_mib']} MiB (+{row['growth_mib']}), "
              f"refused in {row['refusal_s']} s ({row['refusal_over_version']}x sbuf --version)")  # fmt: skip
    print("target met" if report["met"] else "TARGET MISSED")
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {RESULTS}")


if __name__ == "__main__":
    main()

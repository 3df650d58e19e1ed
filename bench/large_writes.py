"""What changing one large record costs: `sbuf add`, `edit` and `forget` of records of 10 KB, 1 MB and
5 MB, each a real one-shot `sbuf` process (no daemon), beside `sbuf --version` timed in the same run.

A project store of 20 everyday notes is built and synced once (`large_records.build`). For each size
and each of `--repeats` rounds: `add` of a pasted log of that size (through an editor that appends the
body, the way a person pastes one), `edit` of it (the editor appends one line), and
`forget --destroy --yes`. Medians are reported, with each step's ratio to `sbuf --version` and the
seconds each megabyte adds over the 10 KB record (`extra_s_per_mb`).

Prints a table and writes bench/results/large_writes.json (or `--out`).

Usage: python bench/large_writes.py [--sizes 10000,1000000,5000000] [--repeats 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from large_records import build, log_body, run, say  # noqa: E402
from machine import machine  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "large_writes.json"
SIZES = (10_000, 1_000_000, 5_000_000)
STEPS = ("add_s", "edit_s", "forget_s")


def one_round(project: Path, env: dict[str, str], size: int, work: Path) -> dict[str, float]:
    """Seconds of one add, edit and forget of a record of `size` bytes."""
    body = work / "body.txt"
    body.write_text(log_body(size), encoding="utf-8")
    add_s, out = run(["--project", "add", "--title", f"Pasted log {size}", "--body", "Log:", "--access", "agent"],
                     project, env)  # fmt: skip
    record_id = out.strip()
    body.write_text("One more line, added by an edit.\n", encoding="utf-8")
    edit_s, _ = run(["--project", "edit", record_id], project, env)
    forget_s, _ = run(["--project", "forget", record_id, "--destroy", "--yes"], project, env)
    return {"add_s": add_s, "edit_s": edit_s, "forget_s": forget_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sbuf-large-writes-bench")
    parser.add_argument("--out", type=Path, default=RESULTS)
    options = parser.parse_args()
    started = time.monotonic()
    project, _paths, env = build(options.work)
    version = statistics.median(run(["--version"], project, env)[0] for _ in range(5))
    rows: list[dict[str, Any]] = []
    for size in (int(value) for value in options.sizes.split(",")):
        say(f"{size:,} bytes …")
        rounds = [one_round(project, env, size, options.work) for _ in range(max(options.repeats, 1))]
        row: dict[str, Any] = {"size_bytes": size}
        for step in STEPS:
            row[step] = round(statistics.median(r[step] for r in rounds), 4)
            row[step.replace("_s", "_per_version")] = round(row[step] / version, 1)
        rows.append(row)
    small = rows[0]
    for row in rows[1:]:
        megabytes = (row["size_bytes"] - small["size_bytes"]) / 1e6
        row["extra_s_per_mb"] = {step: round((row[step] - small[step]) / megabytes, 3) for step in STEPS}
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "version_s": round(version, 4),
        "repeats": options.repeats,
        "seconds": round(time.monotonic() - started, 1),
        "results": rows,
    }
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"sbuf --version: {version:.3f} s (median of 5)")
    print(f"{'size':>10} {'add s':>8} {'edit s':>8} {'forget s':>9}   extra s per MB over the smallest")
    for row in rows:
        extra = row.get("extra_s_per_mb")
        more = " ".join(f"{step[:-2]} {value:.2f}" for step, value in extra.items()) if extra else ""
        print(f"{row['size_bytes']:>10,} {row['add_s']:>8.2f} {row['edit_s']:>8.2f} {row['forget_s']:>9.2f}   {more}")
    print(f"load average: {report['machine']['load_average_at_end']}; saved to {options.out}")


if __name__ == "__main__":
    main()

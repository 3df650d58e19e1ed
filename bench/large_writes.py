"""What changing one large record costs: `sbuf add`, `edit` and `forget` of records of 10 KB, 1 MB and
5 MB, each a real one-shot `sbuf` process (no daemon), beside `sbuf --version` timed in the same run.

A project store of 20 everyday notes is built and synced once (`large_records.build`). For each size
and each of `--repeats` rounds: `add` of a pasted log of that size (through an editor that appends the
body, the way a person pastes one), `edit` of it (the editor appends one line), and
`forget --destroy --yes`; beside them, two floors: `cat` of the body into a copy (`copy_s`, a shell
process reading and writing those bytes), and the least a searchable store does with them (`fts_s`: a
Python process that reads the body, writes a copy, and inserts it, cut at line breaks into rows of
about 1,300 characters as the chunks are, into a new SQLite file with an FTS5 full-text index, in one
committed transaction: SQLite's own word index, written in C). Medians are reported, wall seconds
and the child's CPU seconds (user + system: on a shared host it moves far less than wall time with
the load), with each step's ratio to `sbuf --version` and the seconds each megabyte adds over the
10 KB record (`extra_s_per_mb`).

With `--before DIR` (the root of another version's source, say `git archive main | tar -x -C DIR`)
a second store is built and driven by that version (`PYTHONPATH=DIR/src`), and every round runs both,
one after the other in alternating order, so that both see the same load; the table and the JSON
then hold both (`before` beside `results`).

Prints a table and writes bench/results/large_writes.json (or `--out`).

Usage: python bench/large_writes.py [--sizes 10000,1000000,5000000] [--repeats 3] [--out FILE] [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from large_records import build, log_body, run, say  # noqa: E402
from machine import machine  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "large_writes.json"
SIZES = (10_000, 1_000_000, 5_000_000)
STEPS = ("add_s", "edit_s", "forget_s", "copy_s", "fts_s", "add_cpu_s", "edit_cpu_s", "forget_cpu_s", "copy_cpu_s",
         "fts_cpu_s")  # fmt: skip
# The searchable floor: the body's bytes read, copied and indexed by SQLite FTS5 in a fresh process
FTS_FLOOR = """
import sqlite3, sys
from pathlib import Path
body = Path(sys.argv[1]).read_text(encoding="utf-8")
Path(sys.argv[1] + ".copy").write_text(body, encoding="utf-8")
rows, row, size = [], [], 0
for line in body.splitlines(keepends=True):
    row.append(line)
    size += len(line)
    if size >= 1300:
        rows.append(("".join(row),))
        row, size = [], 0
rows.append(("".join(row),))
database = Path(sys.argv[1] + ".sqlite3")
database.unlink(missing_ok=True)
conn = sqlite3.connect(database, isolation_level=None)
conn.execute("PRAGMA journal_mode = WAL")
conn.execute("PRAGMA synchronous = NORMAL")
conn.execute("CREATE VIRTUAL TABLE chunks USING fts5(text)")
conn.execute("BEGIN")
conn.executemany("INSERT INTO chunks(text) VALUES (?)", rows)
conn.execute("COMMIT")
conn.close()
"""


def timed(args: list[str], project: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system of the child) and stdout of one `sbuf` run."""
    return children_cpu(lambda: run(args, project, env))


def floor(args: list[str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of one floor's process (`cat`, or `FTS_FLOOR`)."""

    def command() -> tuple[float, str]:
        started = time.perf_counter()
        subprocess.run(args, check=True, timeout=60)
        return time.perf_counter() - started, ""

    return children_cpu(command)


def children_cpu(step: Callable[[], tuple[float, str]]) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, out = step()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, out


def one_round(project: Path, env: dict[str, str], size: int, work: Path) -> dict[str, float]:
    """Wall and CPU seconds of one add, edit and forget of a record of `size` bytes."""
    body = work / "body.txt"
    body.write_text(log_body(size), encoding="utf-8")
    copy_s, copy_cpu, _ = floor(["sh", "-c", 'cat "$0" > "$0.copy"', str(body)])
    fts_s, fts_cpu, _ = floor([sys.executable, "-c", FTS_FLOOR, str(body)])
    add = ["--project", "add", "--title", f"Pasted log {size}", "--body", "Log:", "--access", "agent"]
    add_s, add_cpu, out = timed(add, project, env)
    record_id = out.strip()
    body.write_text("One more line, added by an edit.\n", encoding="utf-8")
    edit_s, edit_cpu, _ = timed(["--project", "edit", record_id], project, env)
    forget_s, forget_cpu, _ = timed(["--project", "forget", record_id, "--destroy", "--yes"], project, env)
    return {"add_s": add_s, "edit_s": edit_s, "forget_s": forget_s, "copy_s": copy_s, "fts_s": fts_s,
            "add_cpu_s": add_cpu, "edit_cpu_s": edit_cpu, "forget_cpu_s": forget_cpu, "copy_cpu_s": copy_cpu,
            "fts_cpu_s": fts_cpu}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sbuf-large-writes-bench")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--before", type=Path, help="another version's source root, run alternately with this one")
    options = parser.parse_args()
    started = time.monotonic()
    project, _paths, env = build(options.work)
    sides = {"results": (options.work, project, env)}  # each side: its work directory, project and environment
    if options.before is not None:
        work = options.work.with_name(options.work.name + "-before")
        before_project, _paths, before_env = build(work, options.before.resolve() / "src")
        sides["before"] = (work, before_project, before_env)
    version = statistics.median(run(["--version"], project, env)[0] for _ in range(5))
    rounds: dict[tuple[str, int], list[dict[str, float]]] = {}
    sizes = [int(value) for value in options.sizes.split(",")]
    for size in sizes:
        say(f"{size:,} bytes …")
        for number in range(max(options.repeats, 1)):
            for side in sorted(sides, reverse=number % 2 == 1):  # "before" first in even rounds
                work, side_project, side_env = sides[side]
                rounds.setdefault((side, size), []).append(one_round(side_project, side_env, size, work))
    report: dict[str, Any] = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "version_s": round(version, 4),
        "repeats": options.repeats,
        "seconds": round(time.monotonic() - started, 1),
    }
    for side in sorted(sides, reverse=True):
        report[side] = summary([rounds[(side, size)] for size in sizes], sizes, version)
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"sbuf --version: {version:.3f} s (median of 5)")
    for side in sorted(sides, reverse=True):
        rows = report[side]
        if len(sides) > 1:
            print(f"{side}:")
        print(f"{'size':>10}" + "".join(f"{step:>13}" for step in STEPS))
        for row in rows:
            print(f"{row['size_bytes']:>10,}" + "".join(f"{row[step]:>13.3f}" for step in STEPS))
        for row in rows[1:]:
            extra = ", ".join(f"{step} {value:.2f}" for step, value in row["extra_s_per_mb"].items())
            print(f"{row['size_bytes']:>10,}: seconds per MB over the smallest: {extra}")
    print(f"load average: {report['machine']['load_average_at_end']}; saved to {options.out}")


def summary(by_size: list[list[dict[str, float]]], sizes: list[int], version: float) -> list[dict[str, Any]]:
    """Per size, the median of each step over the rounds, each wall time's ratio to `sbuf --version`,
    and past the first size the seconds each megabyte adds over it."""
    rows: list[dict[str, Any]] = []
    for size, rounds in zip(sizes, by_size, strict=True):
        row: dict[str, Any] = {"size_bytes": size}
        for step in STEPS:
            row[step] = round(statistics.median(r[step] for r in rounds), 4)
            if "cpu" not in step:
                row[step.replace("_s", "_per_version")] = round(row[step] / version, 1)
        rows.append(row)
    small = rows[0]
    for row in rows[1:]:
        megabytes = (row["size_bytes"] - small["size_bytes"]) / 1e6
        row["extra_s_per_mb"] = {step: round((row[step] - small[step]) / megabytes, 3) for step in STEPS}
    return rows


if __name__ == "__main__":
    main()

"""Peak memory and embedding throughput of a fresh `sbuf --local reindex`, by store size and record length.

Stores (built once in the work directory, then reused):

- `short-N`: N one-chunk records of a few sentences (bench/corpus.py, size "short");
- `long-N`: N records with sections, lists and a code fence, about six chunks each (size "long");
- `longmemeval`: the first LongMemEval-S haystack of ../shared/bench as records, one per turn, mapped
  as bench/quality.py maps it (opaque session labels; `--data` overrides where the data is read,
  `--no-longmemeval` leaves it out; the data is checked against SHA256SUMS before any work).

For each store the projection is deleted (no vectors to carry over: every chunk is embedded), then
`sbuf --local reindex` runs as a real subprocess in the store's project directory; its progress bars
go to this terminal. Its peak RSS is the kernel's high-water mark for that child (`ru_maxrss` from
`wait4`), which a busy machine does not inflate. Throughput is chunks/s, records/s and tokens/s over
the command's wall time, with the CPU seconds it used, `sbuf --version` timed in the same run and
the load average before and after: on a shared machine compare ratios, not seconds.

Prints a table and writes bench/results/reindex.json (or `--out`; stores not run keep their last results).

Usage: python bench/reindex.py [--short-sizes 1000,10000] [--long-sizes 1000] [--no-longmemeval]
       [--data DIR] [--work DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sqlite3
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
from corpus import write_store  # noqa: E402
from machine import machine  # noqa: E402
from quality import build_longmemeval_store  # noqa: E402
from shared_data import DEFAULT as DEFAULT_DATA  # noqa: E402
from shared_data import require as require_data  # noqa: E402

from stormbuffer.core.stores import PlatformDirs, StorePaths, View, initialize_store, record_scope, resolve_store
from stormbuffer.embedding import acquire_model

RESULTS = Path(__file__).parent / "results" / "reindex.json"
SBUF = Path(sys.executable).parent / "sbuf"
LONGMEMEVAL = Path("longmemeval") / "longmemeval_s.subset100.seed0.json.gz"
TARGET_PEAK_RSS_MB = 400
VERSION_RUNS = 5


def environment(work: Path) -> dict[str, str]:
    """The benchmark's home and data; the user's model cache, acquired once."""
    cache = PlatformDirs.from_environ(os.environ).shared_cache
    acquire_model(cache)
    skipped = ("XDG_", "STORMBUFFER_", "PYTHONDONTWRITEBYTECODE", "VISUAL", "EDITOR")
    env = {key: value for key, value in os.environ.items() if not key.startswith(skipped)}
    env.update(HOME=str(work / "home"), XDG_DATA_HOME=str(work / "data"), XDG_CACHE_HOME=str(cache.parent))
    return env


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def store(work: Path, name: str, env: dict[str, str], fill: Callable[[StorePaths], None]) -> StorePaths:
    """The project store `name` in the work directory, filled by `fill` when it has no records yet."""
    project = work / name
    project.mkdir(parents=True, exist_ok=True)
    paths = resolve_store(View.PROJECT, project, PlatformDirs.from_environ(env))
    initialize_store(paths)
    if not any(paths.records.glob("*.md")):
        say(f"{name}: writing records …")
        fill(paths)
    return paths


def corpus_store(work: Path, size: str, count: int, env: dict[str, str]) -> tuple[str, StorePaths]:
    name = f"{size}-{count}"

    def fill(paths: StorePaths) -> None:
        write_store(paths.records, record_scope(paths), count, lambda done: say(f"  {done:,} / {count:,}"), size)

    return name, store(work, name, env, fill)


def longmemeval_store(work: Path, data: Path, env: dict[str, str]) -> tuple[str, StorePaths]:
    def fill(paths: StorePaths) -> None:
        items = json.loads(gzip.decompress((data / LONGMEMEVAL).read_bytes()))
        build_longmemeval_store(paths, items[0])

    return "longmemeval", store(work, "longmemeval", env, fill)


def remove_projection(paths: StorePaths) -> None:
    """Delete the projection and its vector files, so that the reindex embeds every chunk."""
    for path in paths.index_dir.glob(f"*{paths.index_name}*"):
        path.unlink()


def sbuf_version(cwd: Path, env: dict[str, str]) -> float:
    """Median wall seconds of `sbuf --version` (after one warm-up run)."""
    times = []
    for _ in range(VERSION_RUNS + 1):
        started = time.perf_counter()
        subprocess.run([str(SBUF), "--version"], cwd=cwd, env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def reindex(paths: StorePaths, env: dict[str, str]) -> dict[str, Any]:
    """Run `sbuf --local reindex` and return its wall and CPU seconds and peak RSS (its stderr is ours)."""
    started = time.perf_counter()
    child = subprocess.Popen([str(SBUF), "--local", "reindex"], cwd=paths.root.parent, env=env,
                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)  # fmt: skip
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    child.stdout.close()
    if child.returncode != 0 or b"Semantic index" not in output:
        raise SystemExit(f"sbuf --local reindex failed (exit {child.returncode}): {output[-300:]!r}")
    return {
        "seconds": round(wall, 2),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux reports KiB
    }


def counts(paths: StorePaths) -> dict[str, int]:
    """Records, chunks, model tokens and vectors in the rebuilt projection."""
    with sqlite3.connect(f"file:{paths.index_path}?mode=ro", uri=True) as conn:
        records, chunks, tokens, texts = conn.execute(
            "SELECT (SELECT count(*) FROM records), count(*), sum(token_count), count(DISTINCT embed_hash) FROM chunks"
        ).fetchone()
        vectors = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
    if vectors != texts:
        raise SystemExit(f"the rebuilt projection has {vectors} vectors for {texts} distinct chunk texts")
    return {"records": records, "chunks": chunks, "tokens": tokens, "vectors": vectors}


def measure(name: str, paths: StorePaths, env: dict[str, str]) -> dict[str, Any]:
    remove_projection(paths)
    load_before = [round(value, 2) for value in os.getloadavg()]
    version = sbuf_version(paths.root.parent, env)
    say(f"{name}: sbuf --local reindex …")
    run = reindex(paths, env)
    found = counts(paths)
    seconds = run["seconds"]
    return {
        "store": name,
        **found,
        **run,
        "records_per_s": round(found["records"] / seconds, 1),
        "chunks_per_s": round(found["chunks"] / seconds, 1),
        "tokens_per_s": round(found["tokens"] / seconds),
        "cpu_ms_per_chunk": round(run["cpu_seconds"] * 1000 / found["chunks"], 2),
        "peak_rss_within_target": run["peak_rss_mb"] <= TARGET_PEAK_RSS_MB,
        "sbuf_version_s": round(version, 3),
        "reindex_over_version": round(seconds / version),
        "load_average_before": load_before,
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def table(results: list[dict[str, Any]]) -> str:
    header = ("store", "records", "chunks", "tokens", "seconds", "CPU s", "records/s", "chunks/s", "tokens/s",
              "peak RSS MB", "--version s", "load before→after")  # fmt: skip
    rows = [header]
    for r in results:
        rows.append((r["store"], f"{r['records']:,}", f"{r['chunks']:,}", f"{r['tokens']:,}", f"{r['seconds']}",
                     f"{r['cpu_seconds']}", f"{r['records_per_s']}", f"{r['chunks_per_s']}", f"{r['tokens_per_s']:,}",
                     f"{r['peak_rss_mb']}", f"{r['sbuf_version_s']}",
                     f"{r['load_average_before'][0]}→{r['load_average_after'][0]}"))  # fmt: skip
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def sizes(text: str) -> list[int]:
    return [int(value) for value in text.split(",") if value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--short-sizes", type=sizes, default=[1000, 10000], help="record counts of short stores")
    parser.add_argument("--long-sizes", type=sizes, default=[1000], help="record counts of long stores")
    parser.add_argument("--no-longmemeval", action="store_true", help="leave out the LongMemEval-S haystack")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LongMemEval data (default ../shared/bench)")
    parser.add_argument("--work", type=Path, help="stores (kept between runs)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="result file (default bench/results/reindex.json)")
    args = parser.parse_args()
    if not args.no_longmemeval:
        require_data(args.data)
    work = args.work or Path(tempfile.mkdtemp(prefix="stormbuffer-reindex-"))
    env = environment(work)
    stores = [] if args.no_longmemeval else [longmemeval_store(work, args.data, env)]
    stores += [corpus_store(work, "short", count, env) for count in args.short_sizes]
    stores += [corpus_store(work, "long", count, env) for count in args.long_sizes]
    results = []
    for name, paths in stores:
        results.append(measure(name, paths, env))
        save(args.out, work, results)  # a long run keeps what it measured so far
    print(table(results))
    print(f"saved {args.out}")


def save(out: Path, work: Path, results: list[dict[str, Any]]) -> None:
    """Write the results, keeping the last results of stores not measured in this run."""
    earlier = json.loads(out.read_text())["results"] if out.is_file() else []
    by_store = {item["store"]: item for item in earlier} | {item["store"]: item for item in results}
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "target_peak_rss_mb": TARGET_PEAK_RSS_MB,
        "work_dir": str(work),
        "results": list(by_store.values()),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

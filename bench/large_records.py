"""What one large record costs: add, the first read after it, embedding it, forget, and the space
given back, for records of 10 KB, 100 KB, 1 MB and 5 MB.

A project store of 20 everyday notes is built and synced once (with vectors). Then, for each size,
every step runs as its own real `sbuf` process without a daemon (`STORMBUFFER_NO_DAEMON=1`, the
one-shot paths an agent hook or a script takes):

- `sbuf --version`, median of three: the floor every ratio is taken against (same run);
- a normal read: `sbuf --project invoke context` on the notes, median of three, before the add;
- add: `sbuf --project add` of a pasted log of that size, through an editor that appends the body
  (the way a person pastes one), timed;
- first read: the next `invoke context` asking for a phrase nine tenths into the record (the read
  syncs the record's changes and embeds at most a small batch), and whether the phrase was found;
- embedded: `sbuf --project sync`, which embeds what the reads left (a daemon does the same in the
  background), timed; `until_embedded_s` is add + first read + sync;
- projection size (database, write-ahead log and vector files) before forget, after
  `forget --destroy --yes` (timed) and after `sbuf --project gc` (timed).

Prints a table and writes bench/results/large_records.json.

Usage: python bench/large_records.py [--sizes 10000,100000,1000000,5000000] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from machine import machine  # noqa: E402

from stormbuffer.core.stores import PlatformDirs, StorePaths, View, initialize_store, resolve_store
from stormbuffer.embedding import acquire_model

SBUF = Path(sys.executable).parent / "sbuf"
RESULTS = Path(__file__).parent / "results" / "large_records.json"
SIZES = (10_000, 100_000, 1_000_000, 5_000_000)
DEEP_PHRASE = "marmalade lighthouse keeper"
NOTES = 20
STEP_TIMEOUT_S = 300.0  # a guard against a hung process


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def environment(work: Path) -> dict[str, str]:
    """The benchmark's home, data and cache; no daemon; the editor appends `body.txt`."""
    skipped = ("XDG_", "STORMBUFFER_", "PYTHONDONTWRITEBYTECODE", "VISUAL", "EDITOR")
    env = {key: value for key, value in os.environ.items() if not key.startswith(skipped)}
    env.update(HOME=str(work / "home"), XDG_DATA_HOME=str(work / "data"), XDG_CACHE_HOME=str(work / "cache"))
    editor = work / "append-body"
    editor.write_text(f'#!/bin/sh\ncat "{work / "body.txt"}" >> "$1"\n', encoding="utf-8")
    editor.chmod(0o755)
    env.update(STORMBUFFER_NO_DAEMON="1", EDITOR=str(editor))
    return env


def run(args: list[str], cwd: Path, env: dict[str, str], stdin: str | None = None) -> tuple[float, str]:
    """Seconds `sbuf args` took, and its stdout; a failure stops the benchmark with its stderr."""
    started = time.perf_counter()
    done = subprocess.run([str(SBUF), *args], cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
                          timeout=STEP_TIMEOUT_S, check=False)  # fmt: skip
    spent = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"`sbuf {' '.join(args)}` failed: {done.stderr.strip()}")
    return spent, done.stdout


def log_body(size: int) -> str:
    """A pasted log of about `size` bytes with one line about the lighthouse at nine tenths."""
    rng = random.Random(size)
    words = "deploy retry cache node timeout request latency worker queue shard replica".split()
    lines: list[str] = []
    total = 0
    while total < size:
        stamp = f"2026-03-{len(lines) % 28 + 1:02d}T10:{len(lines) % 60:02d}"
        line = f"{stamp} {' '.join(rng.choice(words) for _ in range(9))}."
        lines.append(line)
        total += len(line) + 1
    lines[len(lines) * 9 // 10] = f"The {DEEP_PHRASE} notes every zebra crossing at noon."
    return "\n".join(lines) + "\n"


def projection_bytes(paths: StorePaths) -> int:
    return sum(path.stat().st_size for path in paths.index_path.parent.glob(f"{paths.index_path.name}*"))


def context(cwd: Path, env: dict[str, str], query: str) -> tuple[float, dict[str, Any]]:
    spent, out = run(["--project", "invoke", "context"], cwd, env, json.dumps({"version": 1, "query": query}))
    return spent, json.loads(out)


def build(work: Path, python_path: Path | None = None) -> tuple[Path, StorePaths, dict[str, str]]:
    """A project store of `NOTES` small notes, synced with vectors; with `python_path`, written (and
    later driven) by the source found there instead of this one."""
    if work.exists():
        shutil.rmtree(work)
    project = work / "project"
    project.mkdir(parents=True)
    env = environment(work) | ({"PYTHONPATH": str(python_path)} if python_path is not None else {})
    paths = resolve_store(View.PROJECT, project, PlatformDirs(work / "data", work / "cache"))
    initialize_store(paths)
    say("acquiring the model …")
    acquire_model(paths.cache_dir)
    topics = ["deploys", "on-call", "logging format", "Redis TTL", "release train", "code review"]
    for number in range(NOTES):
        topic = topics[number % len(topics)]
        body = f"Note {number} about {topic}: we agreed on a rule for {topic} and wrote it down."
        (work / "body.txt").write_text("", encoding="utf-8")
        run(["--project", "add", "--title", f"{topic} note {number}", "--body", body, "--access", "agent"],
            project, env)  # fmt: skip
    run(["--project", "sync"], project, env)
    return project, paths, env


def measure(project: Path, paths: StorePaths, env: dict[str, str], size: int, work: Path) -> dict[str, Any]:
    version = statistics.median(run(["--version"], project, env)[0] for _ in range(3))
    normal = statistics.median(context(project, env, "how do we deploy")[0] for _ in range(3))
    (work / "body.txt").write_text(log_body(size), encoding="utf-8")
    add_s, out = run(["--project", "add", "--title", f"Pasted log {size}", "--body", "Log:", "--access", "agent"],
                     project, env)  # fmt: skip
    record_id = out.strip()
    first_s, envelope = context(project, env, f"{DEEP_PHRASE} zebra crossing")
    found = any(DEEP_PHRASE in block["text"] for block in envelope["result"]["blocks"])
    fallback = envelope["result"]["receipt"]["semantic_fallback"]
    sync_s, _ = run(["--project", "sync"], project, env)
    settled_s, _ = context(project, env, "how do we deploy")
    before = projection_bytes(paths)
    forget_s, _ = run(["--project", "forget", record_id, "--destroy", "--yes"], project, env)
    after_forget = projection_bytes(paths)
    gc_s, _ = run(["--project", "gc"], project, env)
    after_gc = projection_bytes(paths)
    return {
        "size_bytes": size,
        "version_s": round(version, 4),
        "normal_read_s": round(normal, 4),
        "add_s": round(add_s, 4),
        "first_read_s": round(first_s, 4),
        "first_read_found_deep_phrase": found,
        "first_read_semantic_fallback": fallback,
        "embed_rest_s": round(sync_s, 4),
        "until_embedded_s": round(add_s + first_s + sync_s, 4),
        "read_after_embedding_s": round(settled_s, 4),
        "forget_s": round(forget_s, 4),
        "gc_s": round(gc_s, 4),
        "projection_bytes_before_forget": before,
        "projection_bytes_after_forget": after_forget,
        "projection_bytes_after_gc": after_gc,
        "add_per_version": round(add_s / version, 1),
        "first_read_per_normal_read": round(first_s / normal, 2),
        "forget_per_version": round(forget_s / version, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sbuf-large-records-bench")
    options = parser.parse_args()
    started = time.monotonic()
    project, paths, env = build(options.work)
    rows = []
    for size in (int(value) for value in options.sizes.split(",")):
        say(f"{size:,} bytes …")
        rows.append(measure(project, paths, env, size, options.work))
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "notes": NOTES,
        "seconds": round(time.monotonic() - started, 1),
        "results": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    columns = ("size_bytes", "version_s", "normal_read_s", "add_s", "first_read_s", "embed_rest_s",
               "until_embedded_s", "forget_s", "gc_s", "projection_bytes_before_forget",
               "projection_bytes_after_forget", "projection_bytes_after_gc")  # fmt: skip
    print(" ".join(f"{name:>14.14}" for name in columns))
    for row in rows:
        print(" ".join(f"{row[name]:>14}" for name in columns))
    print("deep phrase found by the first read:", [row["first_read_found_deep_phrase"] for row in rows])
    print(f"load average: {report['machine']['load_average_at_end']}; saved to {RESULTS}")


if __name__ == "__main__":
    main()

"""Write latency and parallel writers by store size.

For each size a deterministic project store (bench/corpus.py) is built once with its projection (the
real tokenizer cuts the chunks; no vectors are needed for writes; building shows progress), then, in
this order:

- `sbuf --version` (the floor, timed in the same run: report ratios on a noisy machine);
- one-shot `sbuf --project invoke remember` (a new title each run), and `invoke get` of the record
  just written (the read after a write; it must find the projection current). A daemon is started
  first, as after a user's first search, and `daemon_answered` says whether it answered these calls
  and the two below;
- one-shot `sbuf --project add --title … --body …` and `sbuf --project list` (answered by the same
  running daemon, whose watcher spares them the stat-based scan of every file), and both again in
  their own process (`STORMBUFFER_NO_DAEMON=1`: `add_own_process`, `list_own_process`), with
  `sbuf --project inbox` (`inbox_own_process`: it reads the candidates through the projection);
- in-process remember: `protocol.handle` in this process on a warm session with a freshness registry,
  as the daemon and the MCP server run it (the watcher's kept list of files: a write re-stats only
  what changed), p50/p95;
- warm MCP `memory_remember` over stdio against one `stormbuffer-mcp` process, p50/p95;
- parallel writers: P processes × N one-shot `invoke remember` at once against the store: ok,
  conflict, lost (an ok answer without its file), partial (a file that does not parse) and writes/s;
  then P MCP servers × M back-to-back `memory_remember`.

Prints a table and writes bench/results/writes.json (sizes not run this time keep their last results).

Usage: python bench/writes.py [--sizes 1000,10000,100000] [--runs 7] [--work DIR] [--writers 8]
       [--per-writer 25] [--mcp-servers 8] [--per-server 50] [--skip-parallel] [--results FILE]
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
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

sys.path.insert(0, str(Path(__file__).parent))
from corpus import write_store  # noqa: E402
from machine import machine  # noqa: E402

from stormbuffer.core.codec import parse_markdown
from stormbuffer.core.stores import PlatformDirs, StorePaths, View, initialize_store, record_scope, resolve_store
from stormbuffer.daemon import relay
from stormbuffer.index.freshness import FreshnessRegistry
from stormbuffer.index.sync import sync_store
from stormbuffer.protocol.invoke import handle
from stormbuffer.protocol.session import NoEmbedder, Session

RESULTS = Path(__file__).parent / "results" / "writes.json"
SBUF = Path(sys.executable).parent / "sbuf"
ADAPTER = Path(sys.executable).parent / "stormbuffer-mcp"
TARGETS_S = {
    "10000": {"remember": 0.35, "add": 0.35, "list": 0.4, "in_process_remember_p50": 0.015,
              "mcp_remember_p50": 0.030},
    "100000": {"remember": 0.8},
}  # fmt: skip
SOURCE = {"kind": "conversation", "reference": "bench/writes", "actor": "agent"}


def environment(work: Path) -> dict[str, str]:
    """The benchmark's home, data and daemon runtime directory; the user's model cache (the tokenizer
    writes use)."""
    cache = PlatformDirs.from_environ(os.environ).shared_cache.parent
    skipped = ("XDG_", "STORMBUFFER_", "PYTHONDONTWRITEBYTECODE", "VISUAL", "EDITOR")
    env = {key: value for key, value in os.environ.items() if not key.startswith(skipped)}
    env.update(HOME=str(work / "home"), XDG_DATA_HOME=str(work / "data"), XDG_CACHE_HOME=str(cache))
    (work / "run").mkdir(mode=0o700, parents=True, exist_ok=True)
    env["XDG_RUNTIME_DIR"] = str(work / "run")  # a daemon of this benchmark's own
    return env


def build(work: Path, records: int, env: dict[str, str]) -> StorePaths:
    project = work / "project"
    project.mkdir(parents=True, exist_ok=True)
    paths = resolve_store(View.PROJECT, project, PlatformDirs.from_environ(env))
    initialize_store(paths)
    if not any(paths.records.glob("*.md")):
        write_store(paths.records, record_scope(paths), records, lambda done: show(f"writing records {done}/{records}"))
        show(f"writing records {records}/{records}", end="\n")
    sync_store(paths, progress=lambda phase, done, total, _report: show(f"syncing: {phase} {done}/{total}"))
    show("syncing: done", end="\n")
    return paths


def show(line: str, end: str = "") -> None:
    """A progress line on stderr, rewritten in place on a terminal (one line each elsewhere)."""
    if sys.stderr.isatty():
        print(f"\r\033[K{line}", end=end, file=sys.stderr, flush=True)
    else:
        print(line, file=sys.stderr, flush=True)


def served(env: dict[str, str]) -> int | None:
    """How many calls the daemon of `env` answered so far; None when none runs."""
    status = relay.ask("status", env)
    return None if status is None else int(status["served"])


def run(args: list[str], cwd: Path, env: dict[str, str], stdin: bytes = b"", check: bool = True
        ) -> tuple[float, bytes]:  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run([str(SBUF), *args], cwd=cwd, env=env, input=stdin, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if check and done.returncode != 0:
        raise SystemExit(f"sbuf {' '.join(args)} failed: {done.stdout[:300]!r} {done.stderr[:300]!r}")
    return elapsed, done.stdout


def remember_request(title: str) -> dict[str, Any]:
    return {
        "version": 1,
        "title": title,
        "kind": "fact",
        "body": f"{title}: written by bench/writes.",
        "source": SOURCE,
    }


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def one_shot(paths: StorePaths, env: dict[str, str], runs: int, tag: str) -> dict[str, Any]:
    cwd = paths.root.parent
    version, remember, get, add, listing, add_alone, list_alone, inbox = [], [], [], [], [], [], [], []
    alone = env | {"STORMBUFFER_NO_DAEMON": "1"}
    run(["--version"], cwd, env)
    run(["--project", "list"], cwd, env)  # warms the page cache and the byte-code files
    relay.open_door(relay.hello("status", env), env, start=True).close()
    run(["--project", "invoke", "get"], cwd, env, json.dumps({"version": 1, "id": "warm-up"}).encode(), check=False)
    before = served(env)
    for index in range(runs):
        version.append(run(["--version"], cwd, env)[0])
        took, out = run(["--project", "invoke", "remember"], cwd, env,
                        json.dumps(remember_request(f"{tag} one-shot {index}")).encode())  # fmt: skip
        remember.append(took)
        record_id = json.loads(out)["result"]["record_id"]
        get.append(run(["--project", "invoke", "get"], cwd, env,
                       json.dumps({"version": 1, "id": record_id}).encode())[0])  # fmt: skip
        add.append(run(["--project", "add", "--title", f"{tag} added {index}", "--body", "Added."], cwd, env)[0])
        listing.append(run(["--project", "list"], cwd, env)[0])
        add_alone.append(
            run(["--project", "add", "--title", f"{tag} alone {index}", "--body", "Added."], cwd, alone)[0]
        )
        list_alone.append(run(["--project", "list"], cwd, alone)[0])
        inbox.append(run(["--project", "inbox"], cwd, alone)[0])
    after = served(env)
    result: dict[str, Any] = {name: statistics.median(values) for name, values in
              (("version", version), ("remember", remember), ("get_after_remember", get), ("add", add),
               ("list", listing), ("add_own_process", add_alone), ("list_own_process", list_alone),
               ("inbox_own_process", inbox))}  # fmt: skip
    result["daemon_answered"] = before is not None and after is not None and after - before >= 4 * runs
    return result


def in_process(paths: StorePaths, env: dict[str, str], rounds: int, tag: str) -> dict[str, float]:
    """Remember on a warm session with a freshness registry, as the daemon runs it (the first two calls,
    which import, load the tokenizer and list the files, are left out)."""
    freshness = FreshnessRegistry()
    session = Session(View.PROJECT, paths, PlatformDirs.from_environ(env), NoEmbedder(), freshness)
    times = []
    try:
        for index in range(rounds + 2):
            started = time.perf_counter()
            envelope = handle("remember", remember_request(f"{tag} in-process {index}"), session)
            if index >= 2:
                times.append(time.perf_counter() - started)
            assert envelope["ok"], envelope
    finally:
        freshness.close()
    return {"in_process_remember_p50": percentile(times, 0.5), "in_process_remember_p95": percentile(times, 0.95)}


async def mcp_writes(paths: StorePaths, env: dict[str, str], count: int, tag: str) -> tuple[list[float], int]:
    """Seconds of each of `count` back-to-back `memory_remember` calls on one adapter, and how many were ok."""
    params = StdioServerParameters(command=str(ADAPTER), args=["--stdio", "--project", "--allow-writes"], env=env,
                                   cwd=paths.root.parent)  # fmt: skip
    times, ok = [], 0
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        for index in range(count):
            arguments = {key: value for key, value in remember_request(f"{tag} {index}").items() if key != "version"}
            started = time.perf_counter()
            result = await client.call_tool("memory_remember", arguments)
            times.append(time.perf_counter() - started)
            ok += bool(result.structured_content and result.structured_content.get("ok"))
    return times, ok


def warm_mcp(paths: StorePaths, env: dict[str, str], rounds: int, tag: str) -> dict[str, float]:
    times, ok = anyio.run(mcp_writes, paths, env, rounds + 5, f"{tag} mcp")
    assert ok == rounds + 5
    warm = times[5:]  # the first calls open the store's watcher and load the tokenizer
    return {"mcp_remember_p50": percentile(warm, 0.5), "mcp_remember_p95": percentile(warm, 0.95)}


def parallel_one_shot(paths: StorePaths, env: dict[str, str], writers: int, each: int, tag: str) -> dict[str, Any]:
    cwd = paths.root.parent

    def writer(label: int) -> list[tuple[bool, str | None]]:
        answers = []
        for index in range(each):
            done = subprocess.run([str(SBUF), "--project", "invoke", "remember"], cwd=cwd, env=env, check=False,
                                  input=json.dumps(remember_request(f"{tag} w{label} {index}")).encode(),
                                  capture_output=True)  # fmt: skip
            envelope = json.loads(done.stdout)
            answers.append((envelope["ok"], envelope["result"]["record_id"] if envelope["ok"] else None))
        return answers

    before = served(env)
    started = time.perf_counter()
    with ThreadPoolExecutor(writers) as pool:
        answers = [answer for batch in pool.map(writer, range(writers)) for answer in batch]
    elapsed = time.perf_counter() - started
    after = served(env)
    daemon_answered = before is not None and after is not None and after - before >= len(answers)
    ok_ids = [record_id for ok, record_id in answers if ok and record_id]
    lost = sum(1 for record_id in ok_ids if not (paths.records / f"{record_id}.md").is_file())
    partial = 0
    for path in paths.records.glob("*.md"):
        try:
            parse_markdown(path.read_bytes(), path.name)
        except Exception:
            partial += 1
    return {"writers": writers, "each": each, "ok": len(ok_ids), "conflict": len(answers) - len(ok_ids),
            "lost": lost, "partial_files": partial, "ok_share": len(ok_ids) / len(answers),
            "writes_per_s": len(ok_ids) / elapsed, "daemon_answered": daemon_answered}  # fmt: skip


def parallel_mcp(paths: StorePaths, env: dict[str, str], servers: int, each: int, tag: str) -> dict[str, Any]:
    async def all_servers() -> list[int]:
        results = [0] * servers

        async def one(index: int) -> None:
            _times, results[index] = await mcp_writes(paths, env, each, f"{tag} s{index}")

        async with anyio.create_task_group() as group:
            for index in range(servers):
                group.start_soon(one, index)
        return results

    started = time.perf_counter()
    ok = sum(anyio.run(all_servers))
    elapsed = time.perf_counter() - started
    total = servers * each
    return {"servers": servers, "each": each, "ok": ok, "conflict": total - ok, "ok_share": ok / total,
            "writes_per_s": ok / elapsed}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "stormbuffer-bench-writes")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--per-writer", type=int, default=25)
    parser.add_argument("--mcp-servers", type=int, default=8)
    parser.add_argument("--per-server", type=int, default=50)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--skip-parallel", action="store_true", help="keep the last parallel figures of each size")
    options = parser.parse_args()
    report: dict[str, Any] = json.loads(options.results.read_text()) if options.results.is_file() else {"sizes": {}}
    tag = datetime.now(UTC).strftime("%H%M%S")
    ran: dict[str, Any] = {}
    for size in (int(value) for value in options.sizes.split(",")):
        work = options.work / str(size)
        env = environment(work)
        paths = build(work, size, env)
        print(f"{size} records: one-shot commands …", file=sys.stderr)
        result: dict[str, Any] = one_shot(paths, env, options.runs, tag)
        result.update(in_process(paths, env, max(options.runs * 3, 20), tag))
        result.update(warm_mcp(paths, env, max(options.runs * 3, 20), tag))
        previous = report["sizes"].get(str(size), {})
        if options.skip_parallel and "parallel_one_shot" in previous:
            result.update({key: previous[key] for key in ("parallel_one_shot", "parallel_mcp")})
        else:
            print(f"{size} records: parallel writers …", file=sys.stderr)
            result["parallel_one_shot"] = parallel_one_shot(paths, env, options.writers, options.per_writer, tag)
            result["parallel_mcp"] = parallel_mcp(paths, env, options.mcp_servers, options.per_server, tag)
        relay.ask("stop", env)
        result["ratios_to_version"] = {name: result[name] / result["version"]
                                       for name in ("remember", "get_after_remember", "add", "list",
                                                    "add_own_process", "list_own_process",
                                                    "inbox_own_process")}  # fmt: skip
        result["targets_s"] = TARGETS_S.get(str(size), {})
        result["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        ran[str(size)] = result
    latest = json.loads(options.results.read_text()) if options.results.is_file() else {"sizes": {}}
    report = {"sizes": {**latest["sizes"], **ran}, "machine": machine()}  # another run may have saved meanwhile
    options.results.parent.mkdir(parents=True, exist_ok=True)
    options.results.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{'records':>8} {'version':>8} {'remember':>9} {'get':>7} {'add':>7} {'list':>7} {'add*':>7} "
          f"{'list*':>7} {'inbox*':>7} {'in-proc':>8} "
          f"{'mcp':>7} {'daemon':>6} {'parallel one-shot ok':>21} {'w/s':>6} {'mcp ok':>7}")  # fmt: skip
    for size, row in sorted(report["sizes"].items(), key=lambda item: int(item[0])):
        one, mcp = row["parallel_one_shot"], row["parallel_mcp"]
        print(f"{size:>8} {row['version']:8.3f} {row['remember']:9.3f} {row['get_after_remember']:7.3f} "
              f"{row['add']:7.3f} {row['list']:7.3f} {row.get('add_own_process', 0):7.3f} "
              f"{row.get('list_own_process', 0):7.3f} {row.get('inbox_own_process', 0):7.3f} "
              f"{row['in_process_remember_p50'] * 1000:6.1f}ms "
              f"{row['mcp_remember_p50'] * 1000:5.1f}ms {str(row.get('daemon_answered', '?')):>6} "
              f"{one['ok']:>6}/{one['ok'] + one['conflict']:<5} lost {one['lost']} partial {one['partial_files']} "
              f"{one['writes_per_s']:6.1f} {mcp['ok']:>3}/{mcp['ok'] + mcp['conflict']}")  # fmt: skip
    print("add*, list*, inbox*: in their own process (STORMBUFFER_NO_DAEMON=1)")
    print(f"load average at the end: {report['machine']['load_average_at_end']}; saved to {options.results}")


if __name__ == "__main__":
    main()

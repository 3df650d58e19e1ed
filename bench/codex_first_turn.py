"""Does the real Codex CLI see the memory tools on its first model request? Warm and cold daemon.

Runs `codex exec` (pinned in tests/tools, installed by scripts/install_test_tools.sh) with
`stormbuffer-mcp --stdio --project` configured and the model provider pointed at the loopback stub
of tests/hosts, which answers the first request with a `memory_recall` call. Counts, over N runs
each, how often the first request listed the five memory tools and the recall's result (a seeded
record's id) reached the next request: with the daemon warm (one session before the runs) and
cold (the daemon stopped before each run). `sbuf --version` is timed in the same run. Results
print as a table and are saved to bench/results/codex_first_turn.json with the machine's load.

Usage: python bench/codex_first_turn.py [--runs 10] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from machine import machine  # noqa: E402

from stormbuffer.daemon import relay  # noqa: E402
from tests.daemon.codex import TOOLS, listed_tools, run_codex  # noqa: E402
from tests.helpers import record_markdown  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "codex_first_turn.json"
SBUF = Path(sys.executable).parent / "sbuf"
RECORD_ID = "0190a6b3-7c1e-7a51-9c39-1b2f4c9d8e11"


def prepare(work: Path) -> tuple[Path, dict[str, str]]:
    """A project store with one seeded record, synced with the model; the project and environment."""
    shutil.rmtree(work, ignore_errors=True)
    project = work / "project"
    project.mkdir(parents=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("XDG_", "STORMBUFFER_"))}
    env.update(HOME=str(work / "home"), XDG_DATA_HOME=str(work / "data"), XDG_CACHE_HOME=str(work / "cache"))
    print("initializing the stores (prepares the model) …", file=sys.stderr)
    for args in (["init"], ["--project", "init"]):
        subprocess.run([str(SBUF), *args], cwd=project, env=env, check=True, capture_output=True)
    scope = "project:" + tomllib.loads((project / ".sbuf" / "store.toml").read_text())["project_id"]
    record = record_markdown(RECORD_ID, scope, title="Release constraint", body="Releases ship on Tuesdays.\n",
                             access="agent")  # fmt: skip
    (project / ".sbuf" / "records" / f"{RECORD_ID}.md").write_text(record, encoding="utf-8")
    subprocess.run([str(SBUF), "--project", "sync"], cwd=project, env=env, check=True, capture_output=True)
    return project, env


def runs(project: Path, env: dict[str, str], count: int, cold: bool) -> dict[str, Any]:
    listed = reached = 0
    seconds, missed = [], []
    for run in range(count):
        if cold:
            relay.stop(env)
        began = time.perf_counter()
        requests = run_codex(project, env, project.parent / f"codex-home-{run}")
        seconds.append(time.perf_counter() - began)
        with_tools = listed_tools(requests[0].body) == list(TOOLS)
        listed += with_tools
        reached += len(requests) > 1 and RECORD_ID in requests[1].text
        if not with_tools:
            missed.append(run + 1)
        print(f"{'cold' if cold else 'warm'} run {run + 1}/{count}", file=sys.stderr)
    return {"runs": count, "tools_on_first_request": listed, "recall_reached_next_request": reached,
            "median_exec_s": round(statistics.median(seconds), 3), "runs_without_tools": missed}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sbuf-codex-bench"))
    options = parser.parse_args()
    project, env = prepare(options.work)
    started = time.perf_counter()
    subprocess.run([str(SBUF), "--version"], env=env, check=True, capture_output=True)
    version = time.perf_counter() - started
    relay.stop(env)
    cold = runs(project, env, options.runs, cold=True)
    warm = runs(project, env, options.runs, cold=False)  # the last cold run left the daemon warm
    relay.stop(env)
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "host": "codex exec (tests/tools pin), model: loopback stub (tests/hosts)",
        "version_s": round(version, 3),
        "results": {"warm": warm, "cold": cold},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{'daemon':<8} {'runs':>5} {'tools on 1st':>13} {'recall reached':>15} {'median exec s':>14}")
    for name, result in (("warm", warm), ("cold", cold)):
        print(f"{name:<8} {result['runs']:>5} {result['tools_on_first_request']:>13} "
              f"{result['recall_reached_next_request']:>15} {result['median_exec_s']:>14.3f}")  # fmt: skip
    print(f"sbuf --version: {version:.3f} s; load average: {report['machine']['load_average_at_end']}")
    print(f"saved to {RESULTS}")


if __name__ == "__main__":
    main()

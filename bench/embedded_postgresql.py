"""The embedded PostgreSQL's costs, through real `sbuf` processes in fresh throwaway homes.

For each of `--rounds` fresh homes, in this order:

- first start: `sbuf team db start` where nothing exists yet (initdb, the server's start, the
  `stormbuffer` database with pgvector);
- attach: `sbuf team db start` again, `--attach` times, with the server running (a process that
  finds the server and connects); in this process, `Embedded.attach` (what every database access
  adds: a look for the socket) and `Embedded.ensure_running` (a connection that proves it runs);
- restart: `sbuf team db stop`, then `sbuf team db start` (a start without initdb);
- a fresh embedded store: `sbuf --global init --engine postgresql`, then the size on disk of the
  server's directory and of the `stormbuffer` database.

`sbuf --version` is timed in the same run (`--attach` times) and every process time is also given as
a ratio to it. Under root the server runs as `nobody`, so the homes live in the temporary directory,
passable by others (0711). Prints a table and writes bench/results/embedded_postgresql.json.

Usage: python bench/embedded_postgresql.py [--rounds 3] [--attach 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from machine import save  # noqa: E402

from stormbuffer.conformance.store import link_tree  # noqa: E402
from stormbuffer.embedding import acquire_model  # noqa: E402
from stormbuffer.engines.postgresql.embedded import Embedded  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "embedded_postgresql.json"
SBUF = Path(sys.executable).parent / "sbuf"


def timed(env: dict[str, str], *args: str) -> float:
    """Seconds one `sbuf` process takes; it must succeed."""
    began = time.perf_counter()
    subprocess.run([str(SBUF), *args], env=env, check=True, capture_output=True, timeout=300)
    return time.perf_counter() - began


def size(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file() and not path.is_symlink())


def database_size(server: Embedded) -> int:
    import psycopg

    with psycopg.connect(server.url().replace("+psycopg", "")) as conn:
        row = conn.execute("SELECT pg_database_size('stormbuffer')").fetchone()
    assert row is not None
    return int(row[0])


def one_round(models: Path, attach: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="sbuf-embedded-bench-"))
    home.chmod(0o711)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("XDG_", "STORMBUFFER_"))}
    env.update(HOME=str(home), STORMBUFFER_NO_DAEMON="1")
    link_tree(models, home / ".cache" / "stormbuffer" / "models")
    server = Embedded(home / ".local" / "share" / "stormbuffer-postgresql")
    try:
        first = timed(env, "team", "db", "start")
        attached = [timed(env, "team", "db", "start") for _ in range(attach)]
        in_process: dict[str, list[float]] = {"attach": [], "ensure_running": []}
        for _ in range(attach):
            for name, call in (("attach", server.attach), ("ensure_running", server.ensure_running)):
                began = time.perf_counter()
                call()
                in_process[name].append(time.perf_counter() - began)
        timed(env, "team", "db", "stop")
        restart = timed(env, "team", "db", "start")
        init = timed(env, "--global", "init", "--engine", "postgresql")
        return {
            "first_start_s": first,
            "attach_process_p50_s": statistics.median(attached),
            "attach_in_process_p50_s": statistics.median(in_process["attach"]),
            "running_check_in_process_p50_s": statistics.median(in_process["ensure_running"]),
            "restart_s": restart,
            "init_s": init,
            "directory_bytes": size(server.base),
            "database_bytes": database_size(server),
        }
    finally:
        subprocess.run([str(SBUF), "team", "db", "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--attach", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sbuf-embedded-models-"))
    acquire_model(work)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("XDG_", "STORMBUFFER_"))}
    version = statistics.median(timed(env, "--version") for _ in range(args.attach))
    rounds = []
    for number in range(args.rounds):
        rounds.append(one_round(work / "models", args.attach))
        print(f"round {number + 1}: " + ", ".join(f"{key} {value:.4g}" for key, value in rounds[-1].items()))
    shutil.rmtree(work, ignore_errors=True)
    summary = {key: statistics.median(entry[key] for entry in rounds) for key in rounds[0]}
    print(f"\nsbuf --version p50: {version * 1000:.0f} ms")
    print(f"{'measure (median of rounds)':34} {'value':>12} {'× --version':>12}")
    for key, value in summary.items():
        if key.endswith("_s"):
            ratio = "" if "in_process" in key else f"{value / version:12.1f}"
            print(f"{key:34} {value * 1000:9.3f} ms {ratio}")
        else:
            print(f"{key:34} {value / 2**20:8.1f} MiB")
    save(RESULTS, {"sbuf_version_p50_s": version, "median": summary, "rounds": rounds, "arguments": vars(args)})


if __name__ == "__main__":
    main()

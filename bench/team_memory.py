"""The team server's memory under writes as well as recalls: `sbuf --project serve --team --workers N`
on a copy of the 10,000-record store bench/team_server.py builds (the copy takes the writes and is
deleted afterwards), while `--writers` clients each add records of `--chunks` paragraphs of about 180
words back to back (`POST /v1/records`, a reviewer's token: every write is embedded, a record's
chunks in one call) and `--readers` clients recall back to back (`POST /v1/invoke/context`), for
`--seconds`, after one recall that opens the model. The server's summed PSS
(`/proc/<pid>/smaps_rollup`) is sampled every `--sample` seconds during the load (its median and
largest sample), and the CPU seconds its processes used; then, 2 s after the load stopped, each
process's RSS, PSS and peak RSS, and their sums: the sum of PSS is what the 400 MB target is judged
on (docs/team.md).
`sbuf --version` is timed in the same run. Results print and are saved to
bench/results/team_memory.json (`team_memory_workers<N>.json` above one worker) with the load average.

    .venv/bin/python bench/team_memory.py [--workers 2] [--seconds 45] [--writers 2] [--readers 4] [--chunks 16]
                                          [--sample 3]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx2  # noqa: E402
from corpus import QUERIES  # noqa: E402
from invoke_latency import environment  # noqa: E402
from machine import save  # noqa: E402
from team_server import MEMORY_TARGET_MB, TeamServer, fresh_store, print_memory  # noqa: E402

from stormbuffer.auth import Role  # noqa: E402
from stormbuffer.auth.tokens import TeamTokens  # noqa: E402
from stormbuffer.core.stores import PlatformDirs, View, record_scope, resolve_store  # noqa: E402
from tests.helpers import Sandbox  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "team_memory.json"
WORDS = ("the release pipeline checks the magnetar before tuesday deploys and rolls back on failure while the "
         "quasar cluster is patched on fridays after the backup finishes").split()  # fmt: skip
SOURCE = {"kind": "conversation", "reference": "chat:bench", "actor": "agent"}


def write_records(url: str, token: str, seed: int, until: float, chunks: int, counts: Counter[str]) -> None:
    """Add records of `chunks` long paragraphs until `until`."""
    rng = random.Random(seed)
    with httpx2.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, trust_env=False, timeout=60) as http:
        while time.monotonic() < until:
            body = "\n\n".join(" ".join(rng.choice(WORDS) for _ in range(180)) + "." for _ in range(chunks))
            record = {"title": f"Bench note {seed}-{rng.getrandbits(32):08x}", "kind": "fact", "access": "agent",
                      "sources": [SOURCE], "body": body}  # fmt: skip
            answer = http.post("/v1/records", json=record)
            counts["written" if answer.status_code == 201 else f"write {answer.status_code}"] += 1


def recall(url: str, token: str, seed: int, until: float, counts: Counter[str], once: bool = False) -> None:
    """Recall the corpus queries in turn until `until` (`once`: one recall)."""
    with httpx2.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, trust_env=False, timeout=60) as http:
        number = seed
        while time.monotonic() < until or once:
            once = False
            query = {"version": 1, "query": QUERIES[number % len(QUERIES)], "budget": 512}
            answer = http.post("/v1/invoke/context", json=query)
            counts["recalled" if answer.status_code == 200 else f"recall {answer.status_code}"] += 1
            number += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=16)
    parser.add_argument("--sample", type=float, default=3.0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sbuf-team-server-bench"))
    options = parser.parse_args()
    _paths, built, version = fresh_store(options.work, 10_000)
    with tempfile.TemporaryDirectory(prefix="sbuf-team-memory-") as temp:
        work = Path(temp) / "store"
        print("copying the store ...", file=sys.stderr)
        shutil.copytree(built.base, work, symlinks=True)
        box = Sandbox(work, environment(work, "cache"), work / "project")
        paths = resolve_store(View.PROJECT, box.cwd, PlatformDirs(work / "data", work / "cache"))
        team = TeamTokens(paths)
        clients = options.writers + options.readers
        tokens = [team.create(f"memory-{n}", Role.REVIEWER, (record_scope(paths),), None) for n in range(clients)]
        server = TeamServer(box, options.workers)
        mine = [Counter[str]() for _ in range(clients)]  # each client's answers by outcome
        try:
            print(f"{options.writers} writers and {options.readers} readers for {options.seconds:.0f} s ...",
                  file=sys.stderr)  # fmt: skip
            until = time.monotonic() + options.seconds
            threads = [threading.Thread(target=write_records, args=(server.base_url, tokens[n], n, until,
                                                                    options.chunks, mine[n]))
                       for n in range(options.writers)]  # fmt: skip
            threads += [threading.Thread(target=recall, args=(server.base_url, tokens[n], n, until, mine[n]))
                        for n in range(options.writers, clients)]  # fmt: skip
            recall(server.base_url, tokens[0], 0, time.monotonic(), Counter[str](), once=True)  # opens the model
            cpu_before = server.cpu_s()
            for thread in threads:
                thread.start()
            samples: list[float] = []  # the summed PSS during the load, MB
            while time.monotonic() < until:
                time.sleep(min(options.sample, max(0.0, until - time.monotonic())))
                samples.append(server.memory_mb()["pss_mb"])
            for thread in threads:
                thread.join()
            cpu = server.cpu_s() - cpu_before
            time.sleep(2.0)  # the last writes' background work settles
            memory = server.memory_mb()
        finally:
            server.stop()
    counts = sum(mine, Counter[str]())
    report: dict[str, Any] = {"workers": options.workers, "seconds": options.seconds, "writers": options.writers,
                              "readers": options.readers, "chunks": options.chunks, "version_s": round(version, 4),
                              "answers": dict(counts), "server_cpu_s": round(cpu, 2), "server_memory": memory,
                              "memory_target_mb": MEMORY_TARGET_MB,
                              "pss_during_load_mb": {"median": statistics.median(samples), "max": max(samples),
                                                     "samples": samples},
                              "memory_meets_target": memory["pss_mb"] <= MEMORY_TARGET_MB}  # fmt: skip
    print(f"sbuf --version: {version * 1000:.1f} ms; {options.workers} worker(s); answers {dict(counts)}; "
          f"server CPU {cpu:.1f} s during the load")  # fmt: skip
    print(f"{'PSS during the load':>26}: median {statistics.median(samples):.0f} MB, largest {max(samples):.0f} MB "
          f"({len(samples)} samples)")  # fmt: skip
    print_memory(memory)
    save(RESULTS if options.workers == 1 else RESULTS.with_name(f"team_memory_workers{options.workers}.json"), report)


if __name__ == "__main__":
    main()

"""A team server process's memory after writes (`adapters/http/worker_memory.py`): a process that frees
scattered memory gets it back from the trimming thread, its threads share a bounded number of malloc
arenas, its SQLite memory is held under the soft limit; `sbuf serve --team`, in one process as in each
worker of `--workers 2`, runs with those bounds and the model's (as its log says, read back from the
process); and `--workers 2` after a burst of large writes keeps each worker within a bound of what it
held before, measured from /proc, while the written records are recalled."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stormbuffer.adapters.http.worker_memory import ARENA_MAX, SQLITE_SOFT_LIMIT, Trimmer
from tests.http.conftest import TIMEOUT, sandbox_with_stores, start

from .test_server import Team
from .test_workers import workers

MB = 1 << 20
# A process that keeps one block in ten of 200 MB it allocated: what it holds beyond its start.
FRAGMENTED = """
import sys, time
from pathlib import Path
def resident():
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096
if sys.argv[1] == "bounded":
    from stormbuffer.adapters.http.worker_memory import bound_memory
    bound_memory()
start = resident()
blocks = [bytes(8192) for _ in range(25_000)]
kept = blocks[::10]
del blocks
deadline = time.monotonic() + 10
while resident() - start > 64 << 20 and time.monotonic() < deadline:
    time.sleep(0.1)
print((resident() - start) >> 20, len(kept))
"""


def held_after_freeing(script: str, mode: str) -> int:
    """MB the process of `script` (FRAGMENTED or LARGE) still holds once it freed what it frees."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), mode], capture_output=True, text=True,
                          timeout=TIMEOUT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[0])


def test_freed_scattered_memory_goes_back_to_the_system() -> None:
    assert held_after_freeing(FRAGMENTED, "plain") > 150  # glibc keeps it: the blocks still in use pin the heap
    assert held_after_freeing(FRAGMENTED, "bounded") <= 64


# A process whose 8 threads allocate at once: how many malloc arenas glibc made (`malloc_stats`, on stderr).
ARENAS = """
import ctypes, sys, threading
if sys.argv[1] == "bounded":
    from stormbuffer.adapters.http.worker_memory import ARENA_MAX, limit_arenas
    assert limit_arenas(ARENA_MAX)
together = threading.Barrier(8)
def allocate():
    blocks = [bytearray(4096) for _ in range(100)]
    together.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
ctypes.CDLL(None).malloc_stats()
"""


def arenas_made(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(ARENAS), mode], capture_output=True, text=True,
                          timeout=TIMEOUT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return sum(line.startswith("Arena ") for line in done.stderr.splitlines())


def test_threads_share_the_bounded_arenas() -> None:
    assert arenas_made("plain") >= 4  # glibc's own: one per thread that allocates while the others hold theirs
    assert 1 <= arenas_made("bounded") <= ARENA_MAX


def test_sqlite_memory_is_held_under_the_soft_limit() -> None:
    code = ("import sqlite3; from stormbuffer.adapters.http.worker_memory import bound_memory; bound_memory(); "
            "print(sqlite3.connect(':memory:').execute('PRAGMA soft_heap_limit').fetchone()[0])")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == SQLITE_SOFT_LIMIT


def test_the_trimmer_releases_after_growth_only() -> None:
    sizes = iter([100, 120, 90, 130, 125, 60, 61])  # MB at its start, at each look and after releasing
    released: list[int] = []
    stopping = threading.Event()

    def resident() -> int:
        size = next(sizes, None)
        if size is None:
            stopping.set()
        return (size or 0) * MB

    trimmer = Trimmer(lambda: released.append(1), growth=32 * MB, poll_s=0.001, resident=resident)
    trimmer.stopping = stopping
    trimmer.run()
    # 120 is 20 above 100: kept; 90 is the new floor; 130 is 40 above it: released, 125 after it;
    # 60 is the new floor and 61 is not 32 above it
    assert released == [1]


WORDS = ("the release pipeline checks the magnetar before tuesday deploys and rolls back on failure while the "
         "quasar cluster is patched on fridays after the backup finishes").split()  # fmt: skip
WRITES = 6  # records of `CHUNKS` long paragraphs each
CHUNKS = 16
BOUNDS = re.compile(r"team server memory bounds pid=(\d+) (.*)")
IN_FORCE = {"sqlite_soft_heap": str(SQLITE_SOFT_LIMIT), "malloc_arenas": str(ARENA_MAX), "trim": "on",
            "model_arena": "off"}  # fmt: skip
BOUND_MB = 96  # anonymous memory a worker may hold beyond what it held before the writes, once settled
SETTLE_S = 30.0


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, acquired_models: Path) -> Iterator[Team]:
    box = sandbox_with_stores(tmp_path_factory.mktemp("team-memory") / "sandbox", acquired_models)
    server = start(box, "--team", "--workers", "2")
    crew = Team(server)
    crew.make("writer", "reviewer")
    yield crew
    if server.process.poll() is None:
        assert server.stop() == 0


def anonymous_mb(pid: int) -> float:
    """The process's anonymous memory (heap and private mappings), from /proc."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no Anonymous line for {pid}")


def recall(team: Team, query: str) -> str:
    """The last of four recalls of `query`, each on a connection of its own: both workers answer some."""
    for _ in range(4):
        answer = team.call("writer", "POST", "/v1/invoke/context", {"version": 1, "query": query, "budget": 512})
        assert answer.status_code == 200, answer.text
    return answer.text


def test_workers_give_back_what_a_burst_of_large_writes_took(team: Team) -> None:
    pids = workers(team.server)
    recall(team, "release pipeline")
    before = {pid: anonymous_mb(pid) for pid in pids.values()}
    for number in range(WRITES):
        paragraphs = [" ".join(WORDS[(number + n + i) % len(WORDS)] for i in range(180)) + "." for n in range(CHUNKS)]
        record = {"title": f"Burst note {number} zebrafinch{number}", "kind": "fact", "access": "agent",
                  "sources": [{"kind": "conversation", "reference": "chat:burst", "actor": "agent"}],
                  "body": "\n\n".join([f"zebrafinch{number} marks this note.", *paragraphs])}  # fmt: skip
        written = team.call("writer", "POST", "/v1/records", record)
        assert written.status_code == 201, written.text
        recall(team, "magnetar quasar backup")
    assert "Burst note 3 zebrafinch3" in recall(team, "zebrafinch3")
    deadline = time.monotonic() + SETTLE_S
    while True:
        grown = {pid: anonymous_mb(pid) - before[pid] for pid in before}
        if max(grown.values()) <= BOUND_MB or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert max(grown.values()) <= BOUND_MB, grown


def bounds(log: list[str]) -> dict[int, dict[str, str]]:
    """The memory bounds each process of a team server logged, by pid."""
    found = BOUNDS.findall("".join(log))
    return {int(pid): dict(field.split("=", 1) for field in fields.split()) for pid, fields in found}


def test_one_process_team_server_runs_with_the_bounds(tmp_path: Path, acquired_models: Path) -> None:
    box = sandbox_with_stores(tmp_path / "sandbox", acquired_models)
    server = start(box, "--team")
    try:
        crew = Team(server)
        crew.make("writer", "reviewer")
        logged = bounds(server.log)
        assert list(logged) == [server.process.pid], "".join(server.log)  # the one process, no worker
        assert IN_FORCE.items() <= logged[server.process.pid].items()
        assert logged[server.process.pid]["document_embeddings"] == "caller"  # writes do not queue behind reads
        record = {"title": "Bounded note kingfisher", "kind": "fact", "access": "agent",
                  "sources": [{"kind": "conversation", "reference": "chat:bounds", "actor": "agent"}],
                  "body": "\n\n".join(" ".join(WORDS) + f" kingfisher {n}." for n in range(4))}  # fmt: skip
        written = crew.call("writer", "POST", "/v1/records", record)
        assert written.status_code == 201, written.text
        assert "Bounded note kingfisher" in recall(crew, "kingfisher release pipeline")
    finally:
        assert server.stop() == 0


def test_each_worker_runs_with_the_bounds(team: Team) -> None:
    pids = workers(team.server)
    logged = bounds(team.server.log)
    assert set(logged) == set(pids.values()), "".join(team.server.log)  # not the main process
    for fields in logged.values():
        assert IN_FORCE.items() <= fields.items()
        assert fields["model_threads"] == "1"  # opened before the fork: onnxruntime starts no thread
        assert fields["document_embeddings"] == "writer"

"""Real processes racing for one store of thousands of records, and writers killed with SIGKILL at
random moments."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stormbuffer.core.codec import parse_markdown
from stormbuffer.core.locks import exclusive_lock
from stormbuffer.core.repository import Repository
from stormbuffer.core.stores import PlatformDirs, View, initialize_store, resolve_store
from stormbuffer.engines.directory import record_files
from stormbuffer.index.sync import sync_store
from tests.stores import write_many

WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from stormbuffer.core.errors import MutationBusy
    from stormbuffer.core.ids import new_record_id
    from stormbuffer.core.records import Record, Source
    from stormbuffer.core.repository import Repository
    from stormbuffer.core.stores import PlatformDirs, View, resolve_store
    from stormbuffer.core.timestamps import Timestamp

    root, label, rounds, mode, wait = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
    paths = resolve_store(View.LOCAL, root, PlatformDirs(root / "data", root / "cache"))
    repo = Repository(paths, lock_wait=wait)
    print("ready", flush=True)
    ok = busy = 0
    for n in range(rounds):
        now = Timestamp.now()
        record = Record(new_record_id(), f"{label} note {n}", "fact", repo.scope, "active", "agent", now, now,
                        sources=(Source("conversation", f"run {label}", "agent"),), body=f"{label} body {n}\\n" * 20)
        try:
            repo.add(record)
            ok += 1
        except MutationBusy:
            busy += 1
            continue
        if mode == "lifecycle":
            try:
                replacement = record.replace(id=new_record_id(), supersedes=(record.id,), body=f"{label} v2 {n}\\n")
                repo.supersede(record.id, replacement)
                repo.archive(replacement.id)
            except MutationBusy:
                pass
    print(ok, busy)
    """
)


BASE_RECORDS = 2000


@pytest.fixture(scope="module")
def base_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of `BASE_RECORDS` records with its projection, built once; each test copies it."""
    root = tmp_path_factory.mktemp("base")
    paths = resolve_store(View.LOCAL, root, PlatformDirs(root / "data", root / "cache"))
    initialize_store(paths)
    write_many(paths, BASE_RECORDS)
    sync_store(paths)
    return root


def _store(tmp_path: Path, base: Path) -> Repository:
    shutil.copytree(base / ".sbuf", tmp_path / ".sbuf")
    paths = resolve_store(View.LOCAL, tmp_path, PlatformDirs(tmp_path / "data", tmp_path / "cache"))
    sync_store(paths)  # the copies have new inodes: their stat is taken again
    return Repository(paths)


def _writer(tmp_path: Path, label: str, rounds: int, mode: str = "add", wait: float = 5.0) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path), label, str(rounds), mode, str(wait)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def _written(repo: Repository, label: str) -> int:
    """How many records the writers labelled `label…` left (the base store's records are not theirs)."""
    return sum(1 for record in repo.records(include_inactive=True) if record.title.startswith(label))


def _assert_consistent(repo: Repository) -> None:
    """Every record file parses, the scan succeeds and no temp file is taken for a record."""
    for path in record_files(repo.paths.records):
        parse_markdown(path.read_bytes(), path.name)
    stored = repo.scan()
    assert all(item.path.suffix == ".md" and not item.path.name.startswith(".") for item in stored)
    by_id = {item.record.id: item.record for item in stored}
    for record in by_id.values():
        for old in record.supersedes:
            if record.status in ("active", "archived"):
                assert by_id[old].status == "superseded"


def test_two_processes_racing_each_write_lands_whole_or_is_refused(tmp_path: Path, base_store: Path) -> None:
    repo = _store(tmp_path, base_store)
    writers = [_writer(tmp_path, label, 60) for label in ("a", "b")]
    landed = refused = 0
    for process in writers:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        ok, busy = (int(v) for v in out.split())
        landed, refused = landed + ok, refused + busy
    assert landed + refused == 120 and landed > 0
    _assert_consistent(repo)
    assert _written(repo, "a note") + _written(repo, "b note") == landed
    assert not list(repo.paths.records.glob(".*.tmp"))


def test_a_held_lock_refuses_the_other_process_after_its_bounded_wait(tmp_path: Path, base_store: Path) -> None:
    repo = _store(tmp_path, base_store)
    with exclusive_lock(repo.paths.mutation_lock):
        started = time.monotonic()
        out, err = _writer(tmp_path, "late", 3, wait=0.3).communicate(timeout=60)
        waited = time.monotonic() - started
    assert out.split() == ["0", "3"], err
    assert waited >= 0.9  # three writes, each waited its 0.3 s
    assert _written(repo, "late") == 0


def test_writer_killed_at_random_moments_leaves_a_consistent_store(tmp_path: Path, base_store: Path) -> None:
    repo = _store(tmp_path, base_store)
    rng = random.Random(20261130)
    for _ in range(12):
        process = _writer(tmp_path, f"k{_}", 10_000, "lifecycle")
        time.sleep(0.25 + rng.random() * 0.5)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        # The next reader finishes any interrupted supersession, then everything parses.
        _assert_consistent(repo)
        assert not repo.paths.journal.exists()
    assert _written(repo, "k") > 0

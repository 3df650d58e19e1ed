"""Writes in a long-running process, on a store of thousands of records: the write's check re-stats
only what the watcher reported, yet an external create, edit, delete or rename made while the
process was idle is seen by its next write, and a store whose watcher lost track is scanned in full.

Watcher events arrive tens of milliseconds after a change; tests wait until the watcher has seen
it (`seen`, a guard against a hang, never a speed assertion) before the write.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stormbuffer.core.codec import parse_markdown, render_markdown
from stormbuffer.core.errors import Conflict, StoreIntegrityError
from stormbuffer.core.repository import Repository
from stormbuffer.core.stores import StorePaths, View
from stormbuffer.daemon import relay
from stormbuffer.index import freshness as fr
from stormbuffer.index import watched
from stormbuffer.index.freshness import StoreFreshness
from stormbuffer.index.sync import scan_files, sync_store
from tests.helpers import invoke, sbuf_env
from tests.integration.test_writes_at_scale import _waiter, draft
from tests.stores import make_store, write_many, write_record

RECORDS = 2_000
GUARD_S = 10.0


@pytest.fixture(scope="module")
def base_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project store of `RECORDS` records with its projection, built once and copied per test."""
    base = tmp_path_factory.mktemp("warm-base")
    paths = make_store(base, View.PROJECT)
    write_many(paths, RECORDS)
    sync_store(paths)
    return base


@pytest.fixture
def store(tmp_path: Path, base_store: Path) -> StorePaths:
    shutil.copytree(base_store, tmp_path, dirs_exist_ok=True, symlinks=True)
    return make_store(tmp_path, View.PROJECT)


@pytest.fixture
def fresh(store: StorePaths) -> Iterator[StoreFreshness]:
    watching = StoreFreshness(store)
    yield watching
    watching.close()


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per full scan of the records directory a check makes."""
    counted: list[int] = []

    def counting(paths: StorePaths) -> dict[str, tuple[int, int, int]]:
        found = scan_files(paths)
        counted.append(len(found))
        return found

    monkeypatch.setattr(watched, "scan_files", counting)
    return counted


def warm(store: StorePaths, fresh: StoreFreshness) -> Repository:
    """The repository of a long-running process, after a first write (which lists the files)."""
    repo = Repository(store, freshness=fresh)
    assert repo.propose(draft(store, "Warm-up write", "Lists the files once.\n"), "agent").outcome
    return repo


def seen(fresh: StoreFreshness, before: int) -> None:
    """Wait until the watcher counted a change after `before`."""
    watcher = fresh.watcher
    assert watcher is not None
    deadline = time.monotonic() + GUARD_S
    while watcher.changes == before:
        assert time.monotonic() < deadline, "the watcher saw nothing"
        time.sleep(0.01)
    time.sleep(0.1)  # a burst reaches the counter in groups; let the last group land


def changes(fresh: StoreFreshness) -> int:
    assert fresh.watcher is not None
    return fresh.watcher.changes


def test_idle_writes_stat_only_what_changed(store: StorePaths, fresh: StoreFreshness, scans: list[int]) -> None:
    repo = warm(store, fresh)
    assert scans == [RECORDS]  # the first write lists the store
    for number in range(5):
        result = repo.propose(draft(store, f"Warm note {number}", "Checked without a scan.\n"), "agent")
        assert result.outcome == "requires_approval"
    assert scans == [RECORDS]
    assert sync_store(store).indexed == 0  # a one-shot full check agrees: the writes kept the projection current


def test_a_file_created_while_idle_with_a_duplicate_title_is_found(
    store: StorePaths, fresh: StoreFreshness, scans: list[int]
) -> None:
    repo = warm(store, fresh)
    before = changes(fresh)
    other = write_record(store, "Created outside", "Same body.\n", file_name="outside/created.md", status="candidate")
    seen(fresh, before)
    result = repo.propose(draft(store, "Created outside", "Same body.\n"), "agent")
    assert (result.outcome, result.related_id) == ("duplicate_of", other.id)
    overlap = repo.propose(draft(store, "created   OUTSIDE", "Another body.\n"), "agent")
    assert (overlap.outcome, overlap.related_id) == ("possible_overlap", other.id)


def test_a_file_created_while_idle_with_the_same_id_is_found(store: StorePaths, fresh: StoreFreshness) -> None:
    repo = warm(store, fresh)
    wanted = draft(store, "Taken id", "Mine.\n")
    before = changes(fresh)
    write_record(store, "Somebody else's", "Theirs.\n", record_id=wanted.id, file_name="elsewhere.md")
    seen(fresh, before)
    with pytest.raises(StoreIntegrityError, match="already exists"):
        repo.propose(wanted, "agent")
    assert not (store.records / f"{wanted.id}.md").exists()


def test_an_edit_made_while_idle_is_seen_and_never_overwritten(store: StorePaths, fresh: StoreFreshness) -> None:
    repo = warm(store, fresh)
    target = repo.propose(draft(store, "Edited later", "Before the edit.\n"), "agent").record_id
    current = repo.find(target)
    path = current.path
    before = changes(fresh)
    edited = current.record.replace(title="Renamed by hand", body="The hand edit.\n")
    path.write_text(render_markdown(edited), encoding="utf-8")
    seen(fresh, before)
    with pytest.raises(Conflict):  # an editor that started from the old bytes
        repo.replace_if_unchanged(current, current.record.replace(status="active"))
    assert parse_markdown(path.read_bytes(), path.name).title == "Renamed by hand"
    duplicate = repo.propose(draft(store, "Renamed by hand", "The hand edit.\n"), "agent")
    assert (duplicate.outcome, duplicate.related_id) == ("duplicate_of", target)
    fresh_title = repo.propose(draft(store, "Edited later", "Before the edit.\n"), "agent")
    assert fresh_title.outcome == "requires_approval"  # the old title is gone from the projection


def test_deletes_and_renames_made_while_idle_are_seen(store: StorePaths, fresh: StoreFreshness) -> None:
    repo = warm(store, fresh)
    gone = repo.propose(draft(store, "Deleted by hand", "Soon gone.\n"), "agent").record_id
    moved = repo.propose(draft(store, "Moved by hand", "Soon elsewhere.\n"), "agent").record_id
    before = changes(fresh)
    (store.records / f"{gone}.md").unlink()
    (store.records / "archive").mkdir()
    os.rename(store.records / f"{moved}.md", store.records / "archive" / "moved.md")
    seen(fresh, before)
    again = repo.propose(draft(store, "Deleted by hand", "Soon gone.\n"), "agent")
    assert again.outcome == "requires_approval"
    duplicate = repo.propose(draft(store, "Moved by hand", "Soon elsewhere.\n"), "agent")
    assert (duplicate.outcome, duplicate.related_id) == ("duplicate_of", moved)
    assert repo.reject(moved).status == "archived"  # found at its new path, written there
    assert parse_markdown((store.records / "archive" / "moved.md").read_bytes(), "moved.md").status == "archived"


def test_a_watcher_that_lost_track_means_a_full_scan(
    store: StorePaths, fresh: StoreFreshness, scans: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = warm(store, fresh)
    monkeypatch.setattr(fr, "MAX_PATHS", 3)
    before = changes(fresh)
    created = [write_record(store, f"Burst {number}", "From a burst.\n", status="candidate") for number in range(6)]
    seen(fresh, before)
    result = repo.propose(draft(store, "Burst 5", "From a burst.\n"), "agent")
    assert (result.outcome, result.related_id) == ("duplicate_of", created[5].id)
    assert len(scans) == 2 and scans[-1] == RECORDS + 1 + 6


def test_another_process_writing_meanwhile_is_seen_by_a_full_scan(
    store: StorePaths, fresh: StoreFreshness, scans: list[int]
) -> None:
    repo = warm(store, fresh)
    other = Repository(store).propose(draft(store, "Written by another", "Elsewhere.\n"), "agent")
    # no wait for the watcher: the other writer moved the stored digest, so the kept list cannot confirm it
    result = repo.propose(draft(store, "Written by another", "Elsewhere.\n"), "agent")
    assert (result.outcome, result.related_id) == ("duplicate_of", other.record_id)
    assert scans == [RECORDS, RECORDS + 1, RECORDS + 2]  # the warm-up, the other writer's check, and ours


def test_threads_of_a_warm_process_and_another_process_write_at_once(store: StorePaths, fresh: StoreFreshness) -> None:
    """Four writer threads sharing one freshness, as the daemon's, and a one-shot writer process at
    the same time: every write lands, and the projection they leave is the one a full check makes."""
    warm(store, fresh)
    before = set(store.records.glob("*.md"))
    other = _waiter(store, 30, 10, "Other process")
    outcomes: list[str] = []

    def writer(label: str) -> None:
        repo = Repository(store, lock_wait=30, freshness=fresh)
        for number in range(10):
            outcomes.append(repo.propose(draft(store, f"Thread {label} {number}", "In parallel.\n"), "agent").outcome)

    threads = [threading.Thread(target=writer, args=(label,)) for label in "abcd"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    out, err = other.communicate(timeout=300)
    assert other.returncode == 0, err
    outcomes += out.split()
    assert outcomes == ["requires_approval"] * 50
    new = set(store.records.glob("*.md")) - before
    titles = {parse_markdown(path.read_bytes(), path.name).title for path in new}
    assert len(titles) == len(new) == 50
    assert sync_store(store).indexed == 0  # every write projected itself, the warm ones included


def test_the_daemon_sees_an_external_duplicate_made_while_it_was_idle(tmp_path: Path, store: StorePaths) -> None:
    env = sbuf_env(tmp_path / "env")
    cwd = store.root.parent
    source = {"kind": "conversation", "reference": "test", "actor": "agent"}
    relay.open_door(relay.hello("status", env), env, start=True).close()  # as after a first search
    first = invoke("remember", {"version": 1, "title": "Daemon warm-up", "kind": "fact", "body": "First.",
                                "source": source}, cwd=cwd, env=env)  # fmt: skip
    assert first["ok"]
    status = relay.ask("status", env)
    assert status is not None and status["served"] >= 1, "the daemon did not answer"
    other = write_record(store, "Made by hand", "By hand.\n", file_name="hand.md", status="candidate")
    time.sleep(1.0)  # far beyond the watcher's latency (tens of milliseconds)
    answer = invoke("remember", {"version": 1, "title": "Made by hand", "kind": "fact", "body": "By hand.",
                                 "source": source}, cwd=cwd, env=env)  # fmt: skip
    assert answer["ok"], json.dumps(answer)
    assert (answer["result"]["outcome"], answer["result"]["related_id"]) == ("duplicate_of", other.id)
    served = relay.ask("status", env)
    assert served is not None and served["served"] > status["served"]


class Clock:
    """A monotonic clock the test moves by hand (the background scan still runs on real time)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def threaded_scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread name of every full scan of the records directory, checks and background scans alike."""
    counted: list[str] = []

    def counting(paths: StorePaths) -> dict[str, tuple[int, int, int]]:
        found = scan_files(paths)
        counted.append(threading.current_thread().name)
        return found

    monkeypatch.setattr(watched, "scan_files", counting)
    return counted


def background_scans(scans: list[str], more: int) -> None:
    """Wait until `more` further background scans have finished."""
    wanted = scans.count("stormbuffer-recheck") + more
    deadline = time.monotonic() + GUARD_S
    while scans.count("stormbuffer-recheck") < wanted:
        assert time.monotonic() < deadline, "no background scan ran"
        time.sleep(0.05)


def test_a_background_scan_that_agrees_spares_writes_the_recheck(store: StorePaths, threaded_scans: list[str]) -> None:
    clock = Clock()
    fresh = StoreFreshness(store, recheck_s=2.0, clock=clock)  # a background scan every second
    try:
        repo = warm(store, fresh)
        clock.now = 1.5
        background_scans(threaded_scans, 2)  # the second one started at 1.5 at the latest
        clock.now = 3.0  # past the bound of the first write's scan, not of the background one
        foreground = len(threaded_scans) - threaded_scans.count("stormbuffer-recheck")
        assert repo.propose(draft(store, "After the bound", "No scan of its own.\n"), "agent").outcome
        assert len(threaded_scans) - threaded_scans.count("stormbuffer-recheck") == foreground
    finally:
        fresh.close()


def test_a_background_scan_that_disagrees_makes_the_next_write_scan(
    store: StorePaths, threaded_scans: list[str]
) -> None:
    clock = Clock()
    fresh = StoreFreshness(store, recheck_s=2.0, clock=clock)
    try:
        repo = warm(store, fresh)
        before = changes(fresh)
        other = write_record(store, "Unseen create", "Same body.\n", status="candidate")
        seen(fresh, before)
        assert fresh.watcher is not None
        fresh.watcher.take_paths()  # as if the kernel's queue had overflowed unnoticed
        clock.now = 1.5
        background_scans(threaded_scans, 2)
        clock.now = 1.6  # within the bound: only the background scan's disagreement makes this write scan
        result = repo.propose(draft(store, "Unseen create", "Same body.\n"), "agent")
        assert (result.outcome, result.related_id) == ("duplicate_of", other.id)
    finally:
        fresh.close()

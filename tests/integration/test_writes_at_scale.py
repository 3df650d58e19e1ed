"""Writes on a store of ten thousand records: they check only what they touch, keep the projection
current, queue behind a busy store for a bounded time, and never overwrite an edit made meanwhile."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stormbuffer.core import atomic, review
from stormbuffer.core.codec import parse_markdown, render_markdown
from stormbuffer.core.errors import Conflict, StoreIntegrityError
from stormbuffer.core.ids import new_record_id
from stormbuffer.core.locks import exclusive_lock
from stormbuffer.core.records import Record, Source
from stormbuffer.core.repository import Repository
from stormbuffer.core.stores import PlatformDirs, StorePaths, View, initialize_store, resolve_store
from stormbuffer.core.timestamps import Timestamp
from stormbuffer.engines.directory import store as directory_store
from stormbuffer.engines.directory import transaction as directory_transaction
from stormbuffer.index.sync import sync_store
from tests.helpers import SBUF, Sandbox, invoke, lock_held_elsewhere
from tests.stores import make_store, write_many

BIG = 10_000


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> StorePaths:
    """A project store of `BIG` records and its projection, built once for this module. Tests only add
    records with titles of their own, so they do not disturb each other."""
    paths = make_store(tmp_path_factory.mktemp("big"), View.PROJECT)
    write_many(paths, BIG)
    sync_store(paths)
    return paths


def draft(paths: StorePaths, title: str, body: str, *, status: str = "candidate", kind: str = "fact") -> Record:
    now = Timestamp.now()
    return Record(new_record_id(), title, kind, f"project:{paths_project_id(paths)}", status, "agent", now, now,
                  sources=(Source("conversation", "test", "agent"),), body=body)  # fmt: skip


def paths_project_id(paths: StorePaths) -> str:
    return Repository(paths).scope.removeprefix("project:")


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the record files the repository parses."""
    seen: list[str] = []

    def counting(data: bytes, name: str) -> Record:
        seen.append(name)
        return parse_markdown(data, name)

    monkeypatch.setattr(directory_store, "parse_markdown", counting)  # where the directory engine reads a file
    monkeypatch.setattr(directory_transaction, "parse_markdown", counting)
    yield seen


def test_duplicates_and_overlaps_at_ten_thousand_records_read_only_what_they_touch(
    big: StorePaths, parses: list[str]
) -> None:
    repo = Repository(big)
    first = repo.propose(draft(big, "Deploys  need the GREEN light", "Wait for the green light.\n"), "agent")
    assert first.outcome == "requires_approval"
    duplicate = repo.propose(draft(big, "deploys need the green light", "Wait for the  green light.\n"), "agent")
    assert (duplicate.outcome, duplicate.related_id) == ("duplicate_of", first.record_id)
    overlap = repo.propose(draft(big, "Deploys need the green light", "Ask the release manager.\n"), "human")
    assert (overlap.outcome, overlap.related_id, overlap.status) == ("possible_overlap", first.record_id, "candidate")
    other_kind = repo.propose(draft(big, "Deploys need the green light", "x\n", kind="decision"), "agent")
    assert other_kind.outcome == "requires_approval"
    # An existing record of the big store is matched too, and an approval checks again.
    base = repo.propose(draft(big, "Base record 4242", "Base record number 4242 says something about topic 71.\n",
                              kind="procedure"), "agent")  # fmt: skip
    assert (base.outcome, base.related_id) == ("duplicate_of", "01900000-0000-7000-8000-000000001092")
    assert repo.approve(overlap.record_id).outcome == "accepted"  # an overlap is approvable
    assert len(parses) < 20  # the matching files only, never the store


def test_the_inbox_at_ten_thousand_records_reads_its_candidates_not_the_store(
    big: StorePaths, parses: list[str]
) -> None:
    repo = Repository(big)
    first = repo.propose(draft(big, "Inbox: rotate the signing key", "Monthly.\n"), "agent")
    overlapping = repo.propose(draft(big, "inbox: rotate the  SIGNING key", "Weekly.\n"), "human")
    assert (overlapping.outcome, overlapping.related_id) == ("possible_overlap", first.record_id)
    repo.propose(draft(big, "Inbox: a decision of its own", "x\n", kind="decision"), "agent")
    parses.clear()
    stored, invalid = repo.review_records()
    # Each file once: the candidates and the records they may overlap, never the store.
    assert invalid == [] and sorted(parses) == sorted(item.path.name for item in stored) and len(stored) < BIG // 4
    in_full = [(c.stored.record.id, c.overlap_id) for c in review.candidates(repo.scan_valid()[0], Timestamp.now())]
    answered = [(c.stored.record.id, c.overlap_id) for c in review.candidates(stored, Timestamp.now())]
    assert answered == in_full and (overlapping.record_id, first.record_id) in answered

    base = big.root.parent.parent
    listed = subprocess.run(
        [str(SBUF), "--project", "inbox", "--json"], cwd=big.root.parent, capture_output=True, text=True, check=False,
        env={**os.environ, "HOME": str(base), "XDG_DATA_HOME": str(base / "data"), "STORMBUFFER_NO_DAEMON": "1"},
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert [(entry["id"], entry["possible_overlap_id"]) for entry in entries] == in_full


def test_a_write_leaves_the_projection_current_for_the_next_read(big: StorePaths) -> None:
    repo = Repository(big)
    result = repo.propose(draft(big, "Fresh after write", "Projected by the write itself.\n"), "agent")
    report = sync_store(big)  # the stat-based check: nothing to index; only files written just now are hashed
    assert (report.indexed, report.removed) == (0, 0) and 1 <= report.hashed <= 5
    from stormbuffer.index import projection as pj

    with pj.reading(big.index_path) as conn:
        row = conn.execute("SELECT status, title_key FROM records WHERE id = ?", (result.record_id,)).fetchone()
        chunks = conn.execute("SELECT count(*) FROM chunks WHERE record_id = ?", (result.record_id,)).fetchone()[0]
    assert row == ("candidate", "fresh after write") and chunks == 1


ONE_SHOT = textwrap.dedent(
    """
    import atexit, sys
    atexit.register(lambda: sys.stderr.write(f"sqlalchemy imported: {'sqlalchemy' in sys.modules}"))
    from stormbuffer.cli import main
    sys.argv = ["sbuf", "--project", "invoke", sys.argv[1]]
    main()
    """
)


def _one_shot(big: StorePaths, operation: str, request: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """`sbuf --project invoke <operation>` in a fresh process: its envelope, and whether it imported SQLAlchemy."""
    base = big.root.parent.parent
    completed = subprocess.run(
        [sys.executable, "-c", ONE_SHOT, operation], input=json.dumps({"version": 1, **request}),
        cwd=big.root.parent, capture_output=True, text=True, check=False,
        env={**os.environ, "HOME": str(base), "XDG_DATA_HOME": str(base / "data"),
             "XDG_CACHE_HOME": str(base / "one-shot-cache")},
    )  # fmt: skip
    return json.loads(completed.stdout), completed.stderr


def test_a_one_shot_write_and_the_read_after_it_never_load_the_projection_writer(big: StorePaths) -> None:
    source = {"kind": "conversation", "reference": "test", "actor": "agent"}
    wrote, imported = _one_shot(big, "remember", {"title": "One-shot note", "kind": "fact", "body": "Quick.",
                                                  "source": source})  # fmt: skip
    assert wrote["ok"] and imported == "sqlalchemy imported: False"
    read, imported = _one_shot(big, "get", {"id": wrote["result"]["record_id"]})
    assert read["result"]["title"] == "One-shot note" and imported == "sqlalchemy imported: False"


def test_an_edit_racing_a_write_fails_the_write_and_survives(big: StorePaths, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = Repository(big)
    candidate = repo.propose(draft(big, "Raced candidate", "Before the edit.\n"), "agent").record_id
    path = big.records / f"{candidate}.md"
    edited = render_markdown(parse_markdown(path.read_bytes(), path.name).replace(body="Edited by hand.\n"))
    real = atomic.write_temp

    def edit_first(target: Path, data: bytes) -> Path:  # the edit lands between the check and the rename
        if target == path:
            path.write_text(edited, encoding="utf-8")
        return real(target, data)

    monkeypatch.setattr(atomic, "write_temp", edit_first)
    with pytest.raises(Conflict, match="changed while it was being written"):
        repo.approve(candidate)
    assert path.read_text(encoding="utf-8") == edited
    assert not list(big.records.glob(".*.tmp"))


def test_a_file_created_meanwhile_under_the_new_name_is_never_replaced(
    big: StorePaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = draft(big, "Taken name", "Mine.\n")
    path = big.records / f"{record.id}.md"
    real = atomic.write_temp

    def squat(target: Path, data: bytes) -> Path:
        if target == path:
            path.write_text("somebody else's file\n", encoding="utf-8")
        return real(target, data)

    monkeypatch.setattr(atomic, "write_temp", squat)
    with pytest.raises(StoreIntegrityError, match="destination already exists"):
        Repository(big).propose(record, "agent")
    assert path.read_text(encoding="utf-8") == "somebody else's file\n"
    path.unlink()


def test_an_edit_racing_a_supersession_keeps_the_edit(big: StorePaths, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = Repository(big)
    old = draft(big, "Superseded soon", "Old text.\n", status="active")
    repo.add(old)
    path = big.records / f"{old.id}.md"
    edited = render_markdown(old.replace(body="Edited meanwhile.\n"))
    real = atomic.write_temp

    def edit_first(target: Path, data: bytes) -> Path:
        if target == big.journal:
            path.write_text(edited, encoding="utf-8")
        return real(target, data)

    monkeypatch.setattr(atomic, "write_temp", edit_first)
    replacement = draft(big, "Superseding", "New text.\n", status="active").replace(supersedes=(old.id,))
    with pytest.raises(Conflict):
        repo.supersede(old.id, replacement)
    monkeypatch.setattr(atomic, "write_temp", real)
    assert path.read_text(encoding="utf-8") == edited
    assert not (big.records / f"{replacement.id}.md").exists()
    big.journal.unlink(missing_ok=True)


# ---- a busy store --------------------------------------------------------------------------------


def project_sandbox(tmp_path: Path) -> Sandbox:
    """A sandbox whose project store is initialized (without the model: writes need none)."""
    box = Sandbox.create(tmp_path)
    initialize_store(resolve_store(View.PROJECT, box.cwd, PlatformDirs.from_environ(box.env)))
    return box


def test_a_one_shot_write_waits_for_a_busy_store_then_lands(tmp_path: Path) -> None:
    box = project_sandbox(tmp_path)
    request = {"version": 1, "title": "Queued", "kind": "fact", "body": "Waited.",
               "source": {"kind": "conversation", "reference": "t", "actor": "agent"}}  # fmt: skip
    with exclusive_lock(box.project_root / "locks" / "mutation.lock"):
        writer = subprocess.Popen(
            [str(SBUF), "--project", "--lock-wait", "20", "invoke", "remember"],
            cwd=box.cwd, env=box.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert writer.stdin is not None
        writer.stdin.write(json.dumps(request))
        writer.stdin.close()
        time.sleep(1.0)
        assert writer.poll() is None  # still waiting
    assert writer.stdout is not None and writer.wait(timeout=60) == 0
    assert json.loads(writer.stdout.read())["result"]["outcome"] == "requires_approval"


def test_a_store_that_stays_busy_is_a_conflict_that_says_so(tmp_path: Path) -> None:
    box = project_sandbox(tmp_path)
    request = {"version": 1, "title": "Refused", "kind": "fact", "body": "Too long a wait.",
               "source": {"kind": "conversation", "reference": "t", "actor": "agent"}}  # fmt: skip
    with lock_held_elsewhere(box.project_root / "locks" / "mutation.lock"):
        started = time.monotonic()
        answer = invoke("remember", request, cwd=box.cwd, env=box.env_with(STORMBUFFER_LOCK_WAIT="0.5"))
        waited = time.monotonic() - started
        added = box.sbuf("--project", "--lock-wait", "0.2", "add", "--title", "Human note", "--body", "Text.")
    assert answer["error"] == {"code": "conflict", "message": "the store stayed busy while this write waited; retry it"}
    assert waited >= 0.5
    assert added.returncode == 1 and "the store stayed busy" in added.stderr
    assert list((box.project_root / "records").glob("*.md")) == []


WAITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from stormbuffer.core.ids import new_record_id
    from stormbuffer.core.records import Record, Source
    from stormbuffer.core.repository import Repository
    from stormbuffer.core.stores import PlatformDirs, View, resolve_store
    from stormbuffer.core.timestamps import Timestamp

    project = Path(sys.argv[1])
    paths = resolve_store(View.PROJECT, project, PlatformDirs(project.parent / "data", project.parent / "cache"))
    repo = Repository(paths, lock_wait=float(sys.argv[2]))
    print("ready", flush=True)
    for n in range(int(sys.argv[3])):
        now = Timestamp.now()
        record = Record(new_record_id(), f"{sys.argv[4]} {n}", "fact", repo.scope, "candidate", "agent", now, now,
                        sources=(Source("conversation", "t", "agent"),), body=f"body {n}\\n")
        try:
            print(repo.propose(record, "agent").outcome, flush=True)
        except Exception as exc:
            print(type(exc).__name__, flush=True)
    """
)


def _waiter(paths: StorePaths, wait: float, count: int, label: str) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-c", WAITER, str(paths.root.parent), str(wait), str(count), label],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def test_a_writer_killed_while_it_waits_leaves_nothing_behind(tmp_path: Path) -> None:
    paths = make_store(tmp_path, View.PROJECT)
    with lock_held_elsewhere(paths.mutation_lock):
        waiting = _waiter(paths, 60, 1, "Killed")
        time.sleep(0.5)
        assert waiting.poll() is None
        os.kill(waiting.pid, signal.SIGKILL)
        waiting.wait(timeout=30)
    after = _waiter(paths, 5, 1, "After")
    out, err = after.communicate(timeout=60)
    assert out.split() == ["requires_approval"], err
    titles = [parse_markdown(path.read_bytes(), path.name).title for path in paths.records.glob("*.md")]
    assert titles == ["After 0"]
    assert not list(paths.records.glob(".*")) and not paths.journal.exists()


def test_parallel_writers_queue_and_nothing_is_lost(big: StorePaths) -> None:
    """The concurrency figure of the benchmark at a smaller count: every write lands or is a conflict
    after the bound, none is lost or partial."""
    before = set(big.records.glob("*.md"))
    writers = [_waiter(big, 30, 15, f"Parallel {label}") for label in "abcd"]
    outcomes = []
    for process in writers:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        outcomes += out.split()
    assert len(outcomes) == 60
    landed = [outcome for outcome in outcomes if outcome == "requires_approval"]
    assert set(outcomes) <= {"requires_approval", "MutationBusy"}
    assert len(landed) >= 59
    new = set(big.records.glob("*.md")) - before
    titles = sorted(parse_markdown(path.read_bytes(), path.name).title for path in new)
    assert len(titles) == len(landed) and all(title.startswith("Parallel ") for title in titles)
    assert not list(big.records.glob(".*.tmp"))
    assert sync_store(big).indexed == 0  # every write projected itself

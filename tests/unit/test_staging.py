"""All-or-nothing multi-file writes: commit, and recovery of hand-made interrupted states."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import tomli_w

from stormbuffer.core import staging
from stormbuffer.core.atomic import write_temp
from stormbuffer.core.codec import parse_markdown, render_markdown
from stormbuffer.core.errors import Conflict, StoreIntegrityError
from stormbuffer.core.ids import new_record_id
from stormbuffer.core.records import Record, Source
from stormbuffer.core.repository import Repository
from stormbuffer.core.stores import PlatformDirs, View, initialize_store, resolve_store
from stormbuffer.core.timestamps import Timestamp


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    paths = resolve_store(View.GLOBAL, tmp_path, PlatformDirs(tmp_path / "data", tmp_path / "cache"))
    initialize_store(paths)
    return Repository(paths)


def record(repo: Repository, body: str = "Body text.\n", **changes: object) -> Record:
    now = Timestamp.now()
    made = Record(
        id=new_record_id(), title="A memory", kind="fact", scope=repo.scope, status="active", access="human",
        created_at=now, updated_at=now, sources=(Source("conversation", "test", "human"),), body=body,
    )  # fmt: skip
    return made.replace(**changes)


def markdown(item: Record) -> bytes:
    return render_markdown(item).encode()


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def interrupted(repo: Repository, files: list[tuple[Path, bytes | None, bytes, bool]]) -> None:
    """Hand-make a crash after the commit point: (destination, before, after, already renamed?)."""
    entries = []
    for path, before, after, renamed in files:
        staged = write_temp(path, after)
        if renamed:
            os.replace(staged, path)
        entry = {
            "path": path.relative_to(repo.paths.root).as_posix(),
            "staged": staged.relative_to(repo.paths.root).as_posix(),
        }
        if before is not None:
            entry["before"] = digest(before)
        entry["after"] = digest(after)
        entries.append(entry)
    repo.paths.import_journal.parent.mkdir(parents=True, exist_ok=True)
    repo.paths.import_journal.write_text(tomli_w.dumps({"files": entries}))


def md_files(repo: Repository) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in repo.paths.records.rglob("*") if path.is_file()}


def test_commit_writes_every_file_and_leaves_no_journal_or_temp(repo: Repository) -> None:
    old = record(repo)
    repo.add(old)
    old_path = repo.paths.records / f"{old.id}.md"
    new = record(repo, body="New body.\n")
    changed = old.replace(body="Changed body.\n")
    writes = [
        staging.FileWrite(repo.paths.records / f"{new.id}.md", markdown(new), None),
        staging.FileWrite(old_path, markdown(changed), old_path.read_bytes()),
    ]
    seen: list[tuple[int, int]] = []
    staging.commit(repo.paths, writes, lambda done, total: seen.append((done, total)))
    assert md_files(repo) == {f"{new.id}.md": markdown(new), f"{old.id}.md": markdown(changed)}
    assert not repo.paths.import_journal.exists()
    assert seen == [(1, 2), (2, 2)]


def test_commit_refuses_an_existing_destination_and_writes_nothing(repo: Repository) -> None:
    first, second = record(repo), record(repo)
    repo.add(first)
    before = md_files(repo)
    writes = [
        staging.FileWrite(repo.paths.records / f"{second.id}.md", markdown(second), None),
        staging.FileWrite(repo.paths.records / f"{first.id}.md", markdown(first), None),
    ]
    with pytest.raises(StoreIntegrityError, match="destination already exists"):
        staging.commit(repo.paths, writes)
    assert md_files(repo) == before


def test_commit_refuses_a_destination_changed_since_it_was_read(repo: Repository) -> None:
    item = record(repo)
    repo.add(item)
    path = repo.paths.records / f"{item.id}.md"
    with pytest.raises(Conflict, match="changed while it was being imported"):
        staging.commit(repo.paths, [staging.FileWrite(path, markdown(item.replace(body="x\n")), b"other bytes")])
    assert path.read_bytes() == markdown(item)


def test_a_failure_while_staging_removes_the_staged_files(repo: Repository, monkeypatch: pytest.MonkeyPatch) -> None:
    items = [record(repo) for _ in range(3)]
    writes = [staging.FileWrite(repo.paths.records / f"{item.id}.md", markdown(item), None) for item in items]
    calls = []

    def failing_temp(path: Path, data: bytes) -> Path:
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        calls.append(path)
        return write_temp(path, data)

    monkeypatch.setattr(staging, "write_temp", failing_temp)
    with pytest.raises(OSError):
        staging.commit(repo.paths, writes)
    assert md_files(repo) == {}
    assert not repo.paths.import_journal.exists()


def test_a_reader_rolls_an_interrupted_import_forward(repo: Repository) -> None:
    kept = record(repo, body="Kept.\n")
    repo.add(kept)
    kept_path = repo.paths.records / f"{kept.id}.md"
    overwritten = kept.replace(body="Overwritten by the import.\n")
    done, pending = record(repo, body="Renamed before the crash.\n"), record(repo, body="Still staged.\n")
    interrupted(
        repo,
        [
            (repo.paths.records / f"{done.id}.md", None, markdown(done), True),
            (kept_path, kept_path.read_bytes(), markdown(overwritten), False),
            (repo.paths.records / f"{pending.id}.md", None, markdown(pending), False),
        ],
    )
    listed = {item.id: item.body for item in repo.records(include_inactive=True)}
    assert listed == {done.id: done.body, kept.id: overwritten.body, pending.id: pending.body}
    assert not repo.paths.import_journal.exists()
    assert sorted(path.name for path in repo.paths.records.iterdir()) == sorted(
        f"{item.id}.md" for item in (done, kept, pending)
    )


def test_a_locked_operation_recovers_first(repo: Repository) -> None:
    staged = record(repo)
    interrupted(repo, [(repo.paths.records / f"{staged.id}.md", None, markdown(staged), False)])
    another = record(repo, body="Added after recovery.\n")
    repo.add(another)
    assert {item.id for item in repo.records()} == {staged.id, another.id}
    assert not repo.paths.import_journal.exists()


def test_recovery_after_every_rename_only_removes_the_journal(repo: Repository) -> None:
    first = record(repo)
    interrupted(repo, [(repo.paths.records / f"{first.id}.md", None, markdown(first), True)])
    with repo.locked():
        pass
    assert not repo.paths.import_journal.exists()
    assert parse_markdown((repo.paths.records / f"{first.id}.md").read_bytes()).id == first.id


def test_recovery_refuses_an_authored_change_and_touches_nothing(repo: Repository) -> None:
    item = record(repo)
    repo.add(item)
    path = repo.paths.records / f"{item.id}.md"
    other = record(repo)
    interrupted(
        repo,
        [
            (repo.paths.records / f"{other.id}.md", None, markdown(other), False),
            (path, path.read_bytes(), markdown(item.replace(body="Import.\n")), False),
        ],
    )
    edited = markdown(item.replace(body="Edited by hand meanwhile.\n"))
    path.write_bytes(edited)
    with pytest.raises(Conflict, match="import recovery conflicts"):
        repo.add(record(repo))
    assert path.read_bytes() == edited
    assert not (repo.paths.records / f"{other.id}.md").exists()
    assert repo.paths.import_journal.exists()


def test_recovery_refuses_a_missing_staged_file(repo: Repository) -> None:
    item = record(repo)
    target = repo.paths.records / f"{item.id}.md"
    interrupted(repo, [(target, None, markdown(item), False)])
    for temp in repo.paths.records.glob(".*.tmp"):
        temp.unlink()
    with pytest.raises(Conflict):
        with repo.locked():
            pass
    assert not target.exists()


@pytest.mark.parametrize(
    "text",
    [
        "not toml [",
        'files = [{ path = "../outside.md", staged = "records/.x.tmp", after = "sha256:00" }]',
        'files = [{ path = "/etc/passwd.md", staged = "records/.x.tmp", after = "' + "sha256:" + "0" * 64 + '" }]',
        'files = [{ path = "records/a.md", staged = "records/.a.tmp", after = "md5:1" }]',
        'files = [{ path = "records/a.md", staged = "records/sub/.a.tmp", after = "' + "sha256:" + "0" * 64 + '" }]',
        'files = [{ path = "records/a.md", staged = "records/.a.tmp" }]',
        "files = []\nextra = 1",
    ],
)
def test_an_invalid_journal_is_reported_and_nothing_changes(repo: Repository, text: str) -> None:
    repo.paths.locks.mkdir(exist_ok=True)
    repo.paths.import_journal.write_text(text)
    with pytest.raises(StoreIntegrityError, match="import journal is invalid"):
        with repo.locked():
            pass
    assert repo.paths.import_journal.read_text() == text


def test_the_supersession_journal_still_rolls_forward(repo: Repository) -> None:
    """A hand-written `supersede.toml` (absolute paths, as older writers kept them) is finished by a read."""
    old = record(repo)
    repo.add(old)
    old_path = repo.paths.records / f"{old.id}.md"
    new = record(repo, body="Replacement.\n", supersedes=(old.id,))
    table = {
        "old_path": str(old_path),
        "new_path": str(repo.paths.records / f"{new.id}.md"),
        "old_before": list(old_path.read_bytes()),
        "old_after": render_markdown(old.replace(status="superseded")),
        "new_after": render_markdown(new),
    }
    repo.paths.journal.write_text(tomli_w.dumps(table))
    assert {item.id: item.status for item in repo.records(include_inactive=True)} == {
        old.id: "superseded",
        new.id: "active",
    }
    assert not repo.paths.journal.exists()

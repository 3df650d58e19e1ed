"""Repository lifecycle, proposals, supersession journal and edit conflicts on a real store: the rules
on both engines (a directory and the test session's PostgreSQL server), the files on the directory."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from stormbuffer.core import journal
from stormbuffer.core.codec import parse_markdown, render_markdown
from stormbuffer.core.errors import Conflict, InvalidState, MutationBusy, NotFound, NotInitialized, ScopeDenied
from stormbuffer.core.ids import new_record_id
from stormbuffer.core.locks import exclusive_lock
from stormbuffer.core.records import Record, Source
from stormbuffer.core.repository import Repository
from stormbuffer.core.stores import (
    DATABASE_URL_ENV,
    DIRECTORY,
    POSTGRESQL,
    PlatformDirs,
    View,
    initialize_store,
    resolve_store,
)
from stormbuffer.core.timestamps import Timestamp
from stormbuffer.engines.directory import transaction


def make_repo(tmp_path: Path, engine: str = DIRECTORY) -> Repository:
    project = tmp_path / "project"
    project.mkdir()
    paths = resolve_store(View.PROJECT, project, PlatformDirs(tmp_path / "data", tmp_path / "cache"))
    initialize_store(paths, engine=engine)
    return Repository(paths)


@pytest.fixture(params=[DIRECTORY, POSTGRESQL])
def repo(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Repository:
    """A store of each engine; the PostgreSQL one in a fresh database of the test server."""
    if request.param == POSTGRESQL:
        monkeypatch.setenv(DATABASE_URL_ENV, request.getfixturevalue("postgres_url"))
    return make_repo(tmp_path, request.param)


@pytest.fixture
def directory_repo(tmp_path: Path) -> Repository:
    return make_repo(tmp_path)


def draft(repo: Repository, title: str = "Deploys need a green build", body: str = "Run the suite first.\n",
          **changes: object) -> Record:  # fmt: skip
    now = Timestamp.now()
    record = Record(
        id=new_record_id(), title=title, kind="fact", scope=repo.scope, status="candidate", access="agent",
        created_at=now, updated_at=now, sources=(Source("conversation", "session 1", "agent"),), body=body,
    )  # fmt: skip
    return record.replace(**changes)


def statuses(repo: Repository) -> dict[str, str]:
    return {record.id: record.status for record in repo.records(include_inactive=True)}


def test_agent_proposal_then_approval(repo: Repository) -> None:
    record = draft(repo)
    result = repo.propose(record, "agent")
    assert (result.outcome, result.status) == ("requires_approval", "candidate")
    assert repo.approve(record.id).outcome == "accepted"
    assert statuses(repo) == {record.id: "active"}


def test_duplicate_and_overlap(repo: Repository) -> None:
    first = draft(repo)
    repo.propose(first, "agent")
    duplicate = repo.propose(draft(repo, body="  run the SUITE   first.\n"), "agent")
    assert (duplicate.outcome, duplicate.related_id) == ("duplicate_of", first.id)
    overlap = repo.propose(draft(repo, body="Something else entirely."), "human")
    assert (overlap.outcome, overlap.status, overlap.related_id) == ("possible_overlap", "candidate", first.id)
    assert len(statuses(repo)) == 2


def test_invalid_proposals_write_nothing(repo: Repository) -> None:
    assert repo.propose(draft(repo, sources=()), "agent").outcome == "invalid"
    inference = draft(repo, sources=(Source("conversation", "x", "Inference"),))
    assert "unsupported inference" in repo.propose(inference, "agent").message
    assert statuses(repo) == {}


def test_update_approval_supersedes_the_old_record(repo: Repository) -> None:
    old = draft(repo, status="active")
    repo.add(old)
    replacement = draft(repo, body="Run the suite and the linter first.\n")
    result = repo.propose_update(old.id, replacement)
    assert (result.outcome, result.related_id) == ("requires_approval", old.id)
    assert statuses(repo) == {old.id: "active", replacement.id: "candidate"}
    assert repo.find(replacement.id).record.supersedes == (old.id,)
    assert repo.approve(replacement.id).related_id == old.id
    assert statuses(repo) == {old.id: "superseded", replacement.id: "active"}
    assert not repo.paths.journal.exists()


def test_lifecycle_rules(repo: Repository) -> None:
    record = draft(repo, status="active")
    repo.add(record)
    repo.archive(record.id)
    with pytest.raises(InvalidState):
        repo.archive(record.id)
    repo.restore(record.id)
    replacement = draft(repo, status="active", supersedes=(record.id,), body="New body.\n")
    repo.supersede(record.id, replacement)
    with pytest.raises(InvalidState):
        repo.restore(record.id)
    with pytest.raises(NotFound):
        repo.approve(new_record_id())


def test_interrupted_supersession_rolls_forward_on_next_read(directory_repo: Repository) -> None:
    repo = directory_repo
    old = draft(repo, status="active")
    repo.add(old)
    old_path = repo.paths.records / f"{old.id}.md"
    new = draft(repo, status="active", supersedes=(old.id,), body="Replacement.\n")
    new_path = repo.paths.records / f"{new.id}.md"
    change = journal.Supersession(
        old_path=old_path,
        old_before=old_path.read_bytes(),
        old_after=render_markdown(old.replace(status="superseded")).encode(),
        new_path=new_path,
        new_before=None,
        new_after=render_markdown(new).encode(),
    )
    # Simulate a crash right after the journal and the first file were written.
    import tomli_w

    repo.paths.journal.write_text(
        tomli_w.dumps(
            {"old_path": f"records/{old.id}.md", "new_path": f"records/{new.id}.md",
             "old_before": list(change.old_before), "old_after": change.old_after.decode(),
             "new_after": change.new_after.decode()}
        )
    )  # fmt: skip
    old_path.write_bytes(change.old_after)
    assert statuses(repo) == {old.id: "superseded", new.id: "active"}
    assert not repo.paths.journal.exists()


def test_journal_recovery_refuses_an_authored_change(directory_repo: Repository) -> None:
    repo = directory_repo
    old = draft(repo, status="active")
    repo.add(old)
    old_path = repo.paths.records / f"{old.id}.md"
    repo.paths.journal.write_text(
        f'old_path = "records/{old.id}.md"\nnew_path = "records/x.md"\n'
        'old_before = [1]\nold_after = "a"\nnew_after = "b"\n'
    )
    with pytest.raises(Conflict):
        repo.archive(old.id)
    assert parse_markdown(old_path.read_bytes()).status == "active"


def test_stale_editor_gets_a_conflict(repo: Repository) -> None:
    record = draft(repo, status="active")
    repo.add(record)
    opened = repo.find(record.id)
    repo.replace_if_unchanged(opened, record.replace(body="Newer body.\n"))
    with pytest.raises(Conflict, match="changed while it was being edited"):
        repo.replace_if_unchanged(opened, record.replace(body="Stale body.\n"))
    assert repo.find(record.id).record.body == "Newer body.\n"


def test_a_lock_busy_for_longer_than_the_wait_is_an_error_without_paths(directory_repo: Repository) -> None:
    repo = directory_repo
    impatient = Repository(repo.paths, lock_wait=0.2)
    with exclusive_lock(repo.paths.mutation_lock):
        with pytest.raises(MutationBusy) as caught:
            impatient.add(draft(repo, status="active"))
    assert str(repo.paths.root) not in str(caught.value)
    assert statuses(repo) == {}


def test_foreign_scope_file_is_denied(directory_repo: Repository) -> None:
    repo = directory_repo
    record = draft(repo, status="active")
    repo.add(record)
    path = repo.paths.records / f"{record.id}.md"
    path.write_text(render_markdown(record.replace(scope="project:elsewhere")))
    with pytest.raises(ScopeDenied):
        repo.find(record.id)
    with pytest.raises(ScopeDenied):
        repo.archive(record.id)


def test_a_store_busy_in_the_database_for_longer_than_the_wait_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres_url: str
) -> None:
    monkeypatch.setenv(DATABASE_URL_ENV, postgres_url)
    repo = make_repo(tmp_path, POSTGRESQL)
    impatient = Repository(repo.paths, lock_wait=0.2)
    with psycopg.connect(postgres_url) as other:  # another writer of this store, mid-transaction
        other.execute("SELECT pg_advisory_xact_lock(hashtextextended('stormbuffer:records:' || %s, 0))", (repo.scope,))
        with pytest.raises(MutationBusy):
            impatient.add(draft(repo, status="active"))
    assert statuses(repo) == {}


def test_forget_deletes_the_record(repo: Repository) -> None:
    record = draft(repo, status="active")
    repo.add(record)
    repo.forget(record.id)
    with pytest.raises(NotFound):
        repo.find(record.id)


def test_a_record_read_before_is_parsed_again_only_when_its_file_changed(
    directory_repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = draft(directory_repo, status="active")
    directory_repo.add(record)
    opened = directory_repo.find(record.id)
    parsed: list[str] = []

    def counted(data: bytes, context: str) -> Record:
        parsed.append(context)
        return parse_markdown(data, context)

    monkeypatch.setattr(transaction, "parse_markdown", counted)
    directory_repo.replace_if_unchanged(opened, record.replace(body="Newer body.\n"))
    assert parsed == []  # the file still held the bytes `opened` was read from
    directory_repo.forget(record.id, opened)  # it holds the edit now: read and parsed again, then forgotten
    assert parsed == [f"{record.id}.md"]
    with pytest.raises(NotFound):
        directory_repo.find(record.id)


def test_uninitialized_store_creates_nothing(tmp_path: Path) -> None:
    paths = resolve_store(View.LOCAL, tmp_path, PlatformDirs(tmp_path / "data", tmp_path / "cache"))
    repo = Repository(paths)
    now = Timestamp.now()
    record = Record(new_record_id(), "A title", "fact", "global", "active", "human", now, now,
                    sources=(Source("document", "README.md", "human"),), body="Body.\n")  # fmt: skip
    with pytest.raises(NotInitialized):
        repo.add(record)
    with pytest.raises(NotInitialized):
        repo.records()
    assert not (tmp_path / ".sbuf").exists()

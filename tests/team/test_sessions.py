"""Review-page sessions and scope labels on a real project store: a session opens only for an
active token, ends with its token, its lifetime or sign-out, kept in the process or in the file
worker processes share (where another server of the store sees it at once); labels are kept private and name
scopes, with the project's name as the fallback for the store's own."""

from __future__ import annotations

import stat
from datetime import timedelta
from pathlib import Path

import pytest

from stormbuffer.auth import Role
from stormbuffer.auth import sessions as session_module
from stormbuffer.auth.labels import LabelError, ScopeLabels, ScopeNames
from stormbuffer.auth.sessions import TeamSessions
from stormbuffer.auth.tokens import TeamTokens
from stormbuffer.core.stores import PlatformDirs, StorePaths, View, initialize_store, read_config, resolve_store
from tests.helpers import Sandbox

OTHER = "project:01900000-0000-7000-8000-000000000bad"


@pytest.fixture
def store(tmp_path: Path) -> StorePaths:
    box = Sandbox.create(tmp_path / "sandbox")
    paths = resolve_store(View.PROJECT, box.cwd, PlatformDirs.from_environ(box.env))
    initialize_store(paths)
    return paths


@pytest.fixture(params=[False, True], ids=["in-process", "shared-file"])
def shared(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_a_session_opens_for_an_active_token_and_ends_with_it(store: StorePaths, shared: bool) -> None:
    tokens = TeamTokens(store)
    token = tokens.create("alice", Role.REVIEWER, ("global",), timedelta(days=1))
    sessions = TeamSessions(tokens, shared=shared)
    assert sessions.open(token[:-1] + "x") is None and sessions.open("") is None
    opened = sessions.open(token)
    assert opened is not None
    session, principal = opened
    assert (principal.name, principal.role) == ("alice", Role.REVIEWER) and token not in session
    assert sessions.principal(session) == principal
    assert sessions.principal(session + "x") is None
    tokens.revoke("alice")
    assert sessions.principal(session) is None
    assert sessions.open(token) is None


def test_a_session_ends_on_sign_out_and_after_its_lifetime(store: StorePaths, shared: bool) -> None:
    tokens = TeamTokens(store)
    token = tokens.create("bob", Role.READER, ("global",), None)
    sessions = TeamSessions(tokens, shared=shared)
    first, second = sessions.open(token), sessions.open(token)
    assert first is not None and second is not None and first[0] != second[0]
    sessions.close(first[0])
    assert sessions.principal(first[0]) is None and sessions.principal(second[0]) is not None
    expiring = TeamSessions(tokens, lifetime_s=0.0, shared=shared)
    opened = expiring.open(token)
    assert opened is not None and expiring.principal(opened[0]) is None


def test_the_oldest_sessions_go_first_beyond_the_bound(
    store: StorePaths, shared: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_module, "MAX_SESSIONS", 3)
    tokens = TeamTokens(store)
    token = tokens.create("carol", Role.AGENT, ("global",), None)
    sessions = TeamSessions(tokens, shared=shared)
    opened = [sessions.open(token) for _ in range(4)]
    ids = [item[0] for item in opened if item is not None]
    assert sessions.principal(ids[0]) is None
    assert all(sessions.principal(session) is not None for session in ids[1:])


def test_workers_sharing_the_file_see_each_others_sessions_and_sign_outs(store: StorePaths) -> None:
    tokens = TeamTokens(store)
    token = tokens.create("dana", Role.READER, ("global",), None)
    first, second = TeamSessions(tokens, shared=True), TeamSessions(tokens, shared=True)
    opened = first.open(token)
    assert opened is not None and second.principal(opened[0]) == opened[1]
    second.close(opened[0])
    assert first.principal(opened[0]) is None
    kept = (store.root / "team" / "sessions.sqlite3").read_bytes()
    assert opened[0].encode() not in kept and token.encode() not in kept  # hashes only
    assert TeamSessions(tokens).principal(first.open(token)[0]) is None  # type: ignore[index]  # one process's memory knows none


def test_labels_name_scopes_privately_and_the_project_name_is_the_fallback(store: StorePaths) -> None:
    own = read_config(store).record_scope
    names = ScopeNames(store)
    assert names(own) == read_config(store).project_name
    assert (names("global"), names(OTHER)) == ("global", "unnamed project")
    labels = ScopeLabels(store)
    labels.set(OTHER, "Payments team")
    labels.set(own, 'Ops "core" ✓')
    assert ScopeNames(store)(OTHER) == "Payments team" and ScopeNames(store)(own) == 'Ops "core" ✓'
    assert stat.S_IMODE(labels.file.stat().st_mode) == 0o600
    assert stat.S_IMODE(labels.folder.stat().st_mode) == 0o700
    for scope, label in ((OTHER, ""), (OTHER, " x"), (OTHER, "a\nb"), (OTHER, "x" * 65)):
        with pytest.raises(LabelError):
            labels.set(scope, label)
    with pytest.raises(ValueError):
        labels.set("not a scope", "Name")
    labels.file.write_text("[labels]\n'project:x y' = 1\n", encoding="utf-8")
    with pytest.raises(LabelError, match="damaged"):
        labels.read()
    assert ScopeNames(store)(OTHER) == "unnamed project"  # a damaged file names nothing

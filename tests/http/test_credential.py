"""The local credential (`sbuf auth token`) and the authorization every door asks for.

`sbuf auth token` runs as a real process; the file checks read real files with real modes and owners
(the owner check chowns a file to another uid, so it runs as root, as CI does)."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stormbuffer.auth import (
    ALL_SCOPES,
    OPERATIONS,
    PROTOCOL_OPERATIONS,
    Principal,
    Refused,
    Role,
    authorize,
    local_user,
)
from stormbuffer.auth.credential import CredentialError, ensure_token, read_token, token_path
from tests.helpers import Sandbox

TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")


def test_sbuf_auth_token_makes_one_private_token_and_keeps_it(tmp_path: Path) -> None:
    box = Sandbox.create(tmp_path)
    first, second = box.sbuf("auth", "token"), box.sbuf("auth", "token")
    assert first.returncode == 0 and first.stderr == ""
    assert TOKEN.fullmatch(first.stdout.strip()) and first.stdout == second.stdout
    path = tmp_path / "home" / ".config" / "stormbuffer" / "local-token"
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    assert path.read_text().strip() == first.stdout.strip()
    assert [entry.name for entry in path.parent.iterdir()] == ["local-token"]  # no partial file left behind
    elsewhere = box.sbuf("auth", "token", env=box.env_with(XDG_CONFIG_HOME=str(tmp_path / "xdg")))
    assert (tmp_path / "xdg" / "stormbuffer" / "local-token").is_file()
    assert elsewhere.stdout != first.stdout


def unsafe(path: Path, how: str) -> None:
    if how == "group-readable file":
        path.chmod(0o640)
    elif how == "symlinked file":
        target = path.with_name("elsewhere")
        path.rename(target)
        path.symlink_to(target)
    elif how == "another user's file":
        os.chown(path, 65534, 65534)
    elif how == "damaged file":
        path.write_text("not a token\n")


@pytest.mark.parametrize("how", ["group-readable file", "symlinked file", "another user's file", "damaged file"])
def test_an_unsafe_credential_is_refused_without_showing_it(tmp_path: Path, how: str) -> None:
    if how == "another user's file":
        assert os.geteuid() == 0, "chown to another uid needs root (as CI runs)"
    box = Sandbox.create(tmp_path)
    token = box.sbuf("auth", "token").stdout.strip()
    path = token_path(box.env)
    unsafe(path, how)
    with pytest.raises(CredentialError) as refused:
        read_token(box.env)
    assert token not in str(refused.value) and str(tmp_path) not in str(refused.value)
    done = box.sbuf("auth", "token")
    assert done.returncode == 1 and done.stdout == "" and token not in done.stderr
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    served = box.sbuf("--project", "init")
    assert served.returncode == 0
    serve = box.sbuf("--project", "serve", "--port", "0")  # refuses to start rather than serve an unsafe secret
    assert serve.returncode == 1 and serve.stderr.startswith("error: could not start server: ")
    assert token not in serve.stderr + serve.stdout


def test_an_open_directory_of_ours_is_refused_by_readers_and_closed_by_sbuf(tmp_path: Path) -> None:
    """A reader (a client) refuses an open credential directory as it finds it; `sbuf auth token` and
    `sbuf serve`, which own it, close it (the file's own checks still apply)."""
    env = {"HOME": str(tmp_path)}
    folder = tmp_path / ".config" / "stormbuffer"
    folder.mkdir(parents=True)
    folder.chmod(0o775)
    with pytest.raises(CredentialError, match="open to other users"):
        read_token(env)
    token = ensure_token(env)
    assert folder.stat().st_mode & 0o777 == 0o700 and read_token(env) == token


def test_first_uses_at_once_agree_on_one_token(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    with ThreadPoolExecutor(8) as pool:
        tokens = set(pool.map(lambda _: ensure_token(env), range(32)))
    assert len(tokens) == 1 and read_token(env) in tokens
    assert [entry.name for entry in (tmp_path / ".config" / "stormbuffer").iterdir()] == ["local-token"]


def test_no_token_yet_reads_as_none(tmp_path: Path) -> None:
    assert read_token({"HOME": str(tmp_path)}) is None
    assert not (tmp_path / ".config").exists()  # reading never creates


def principal(role: Role, scopes: frozenset[str] | None = ALL_SCOPES) -> Principal:
    return Principal("someone", role, scopes, "program")


def test_each_role_includes_the_ones_before() -> None:
    allowed = {role: {op for op in OPERATIONS if not _refused(principal(role), op, "global")} for role in Role}
    assert allowed[Role.READER] == {"recall", "get", "resources", "search"}
    assert allowed[Role.AGENT] == allowed[Role.READER] | {"remember", "update", "propose"}
    assert allowed[Role.REVIEWER] == allowed[Role.AGENT] | {"approve", "reject", "add", "edit", "archive", "restore"}
    assert allowed[Role.ADMIN] == set(OPERATIONS)
    with pytest.raises(Refused, match="needs the reviewer role"):
        authorize(principal(Role.AGENT), "approve", "global")


def test_a_scope_outside_the_principals_is_refused() -> None:
    scoped = principal(Role.ADMIN, frozenset({"project:a"}))
    authorize(scoped, "get", "project:a")
    with pytest.raises(Refused, match="outside"):
        authorize(scoped, "get", "project:b")


def test_the_local_user_is_one_admin_over_every_scope() -> None:
    person, program = local_user("person"), local_user("program")
    assert (person.role, person.scopes, person.person) == (Role.ADMIN, ALL_SCOPES, True)
    assert (program.name, program.person) == (person.name, False)
    for operation in OPERATIONS:
        authorize(program, operation, "project:anything")


def _refused(who: Principal, operation: str, scope: str) -> bool:
    try:
        authorize(who, operation, scope)
    except Refused:
        return True
    return False


def test_every_protocol_operation_is_authorized_as_a_known_operation() -> None:
    from stormbuffer.protocol.requests import OPERATIONS as PROTOCOL

    assert set(PROTOCOL_OPERATIONS) == set(PROTOCOL)
    assert set(PROTOCOL_OPERATIONS.values()) <= set(OPERATIONS)
    reader = principal(Role.READER)
    assert [op for op in PROTOCOL_OPERATIONS if not _refused(reader, PROTOCOL_OPERATIONS[op], "g")] == [
        "search", "context", "get"]  # fmt: skip

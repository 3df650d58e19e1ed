"""`sbuf team token create|list|revoke` through the real `sbuf`: the token is printed once and kept
only as a hash, in a private file with the store; listing shows no secret; bad input is refused
with a clear message."""

from __future__ import annotations

import hashlib
import json
import re
import stat
import subprocess
from pathlib import Path

import pytest

from stormbuffer.core.stores import PlatformDirs, View, initialize_store, resolve_store
from tests.helpers import SBUF, Sandbox

TOKEN = re.compile(r"sbt_[0-9a-f]{12}_[A-Za-z0-9_-]{43}")


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    sandbox = Sandbox.create(tmp_path / "sandbox")
    initialize_store(resolve_store(View.PROJECT, sandbox.cwd, PlatformDirs.from_environ(sandbox.env)))
    return sandbox


def create(box: Sandbox, *args: str) -> str:
    made = box.sbuf("--project", "team", "token", "create", *args)
    assert made.returncode == 0, made.stderr
    token = made.stdout.splitlines()[-1]
    assert TOKEN.fullmatch(token), made.stdout
    return token


def tokens_file(box: Sandbox) -> Path:
    return box.project_root / "team" / "tokens.toml"


def test_a_token_is_shown_once_and_kept_as_a_hash(box: Sandbox) -> None:
    token = create(box, "--name", "alice", "--role", "reviewer")
    text = tokens_file(box).read_text(encoding="utf-8")
    assert token not in text and token[len("sbt_") + 13 :] not in text
    assert hashlib.sha256(token.encode()).hexdigest() in text
    assert stat.S_IMODE(tokens_file(box).stat().st_mode) == 0o600
    assert stat.S_IMODE(tokens_file(box).parent.stat().st_mode) == 0o700
    listed = box.sbuf("--project", "team", "token", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert token not in listed.stdout and token[len("sbt_") + 13 :] not in listed.stdout
    (entry,) = json.loads(listed.stdout)
    scope = "project:" + re.search(r'project_id = "([^"]+)"', (box.project_root / "store.toml").read_text()).group(1)  # type: ignore[union-attr]
    assert (entry["name"], entry["role"], entry["scopes"], entry["state"]) == ("alice", "reviewer", [scope], "active")
    assert entry["expires_at"] is not None and entry["revoked_at"] is None  # 90 days by default


def test_scopes_and_expiry_are_kept_and_revocation_shows(box: Sandbox) -> None:
    create(box, "--name", "ci", "--role", "agent", "--scope", "global", "--scope", "project:abc", "--expires", "never")
    create(box, "--name", "bob", "--role", "reader", "--expires", "12h")
    revoked = box.sbuf("--project", "team", "token", "revoke", "ci")
    assert revoked.returncode == 0, revoked.stderr
    entries = {
        entry["name"]: entry for entry in json.loads(box.sbuf("--project", "team", "token", "list", "--json").stdout)
    }
    assert entries["ci"]["scopes"] == ["global", "project:abc"] and entries["ci"]["expires_at"] is None
    assert entries["ci"]["state"] == "revoked" and entries["ci"]["revoked_at"] is not None
    assert entries["bob"]["state"] == "active"
    plain = box.sbuf("--project", "team", "token", "list").stdout
    assert re.search(r"^ci  agent  revoked  no expiry  global project:abc$", plain, re.M), plain
    again = create(box, "--name", "ci", "--role", "agent")  # a revoked name may be given again
    assert again


@pytest.mark.parametrize(("args", "message"), [
    (("--name", "Alice", "--role", "agent"), "a token name is 1 to 64 lowercase letters"),
    (("--name", "agent", "--role", "agent"), "not `agent`, `human` or `inference`"),
    (("--name", "a", "--role", "agent", "--scope", "nowhere"), "invalid scope"),
    (("--name", "a", "--role", "agent", "--expires", "soon"), "expiry must be"),
    (("--name", "a", "--role", "owner"), "invalid value for '--role'"),
])  # fmt: skip
def test_bad_input_is_refused_clearly(box: Sandbox, args: tuple[str, ...], message: str) -> None:
    refused = box.sbuf("--project", "team", "token", "create", *args)
    assert refused.returncode != 0 and message in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and not tokens_file(box).exists()


def test_a_name_is_given_once_and_only_given_names_are_revoked(box: Sandbox) -> None:
    create(box, "--name", "alice", "--role", "admin")
    twice = box.sbuf("--project", "team", "token", "create", "--name", "alice", "--role", "reader")
    assert twice.returncode != 0 and "a token named alice exists" in twice.stderr
    unknown = box.sbuf("--project", "team", "token", "revoke", "nobody")
    assert unknown.returncode != 0 and "no unrevoked token is named nobody" in unknown.stderr


def test_a_damaged_file_is_named_without_a_traceback(box: Sandbox) -> None:
    create(box, "--name", "alice", "--role", "admin")
    tokens_file(box).write_text("[[token]]\nname = 3\n", encoding="utf-8")
    listed = box.sbuf("--project", "team", "token", "list")
    assert listed.returncode != 0 and "team/tokens.toml is damaged" in listed.stderr
    assert "Traceback" not in listed.stderr


def test_an_uninitialized_store_has_no_tokens(tmp_path: Path) -> None:
    box = Sandbox.create(tmp_path / "bare")
    refused = box.sbuf("--project", "team", "token", "create", "--name", "a", "--role", "agent")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert not (box.project_root / "team").exists()


def test_concurrent_creations_all_land_in_the_file(box: Sandbox) -> None:
    """Each creation rewrites the file under the store's mutation lock: none is lost to another."""
    makers = [
        subprocess.Popen(
            [str(SBUF), "--project", "team", "token", "create", "--name", f"member-{number}", "--role", "agent"],
            cwd=box.cwd,
            env=box.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for number in range(8)
    ]
    outputs = [maker.communicate(timeout=60) for maker in makers]
    assert all(maker.returncode == 0 for maker in makers), [err for _, err in outputs]
    listed = json.loads(box.sbuf("--project", "team", "token", "list", "--json").stdout)
    assert sorted(entry["name"] for entry in listed) == sorted(f"member-{number}" for number in range(8))
    digests = tokens_file(box).read_text(encoding="utf-8")
    for out, _ in outputs:
        assert hashlib.sha256(out.splitlines()[-1].encode()).hexdigest() in digests

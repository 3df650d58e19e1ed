"""Files on disk against another user of the same machine, through the real `sbuf`.

The tests create a second OS user (they run as root, locally and in CI) and run its steps under
its uid: it reads nothing of a store, a projection or a draft, and a directory it made first at a
name in the shared temporary directory is refused rather than used. Where the victim must meet a
cache it cannot write, it runs as root without the capability to override file permissions. A
symbolic link as a store's directory or `records/` is refused. The sandbox lives in a directory
others may traverse, as a home directory usually is, so only the modes Stormbuffer sets protect it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from stormbuffer.core.dirs import PlatformDirs
from stormbuffer.core.stores import fallback_index_dir, global_store, initialize_store
from tests.helpers import SBUF, Sandbox, link_tree

NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search", "--"]
SECRET = "hunter2-correct-horse"


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        """`command` (a core utility, never Python: the interpreter may live where this user cannot go)."""
        return subprocess.run(
            list(command), user=self.uid, group=self.gid, extra_groups=[], capture_output=True, text=True,
            check=False, cwd="/",
        )  # fmt: skip


@pytest.fixture(scope="module")
def other_user() -> Iterator[User]:
    name = f"sbuf-{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    try:
        ids = subprocess.run(["id", "-u", name], capture_output=True, text=True, check=True).stdout
        gid = subprocess.run(["id", "-g", name], capture_output=True, text=True, check=True).stdout
        yield User(name, int(ids), int(gid))
    finally:
        subprocess.run(["userdel", name], check=False)


@pytest.fixture
def box(acquired_models: Path) -> Iterator[Sandbox]:
    """A sandbox in a directory every user may traverse, with a shared temp directory (mode 1777)."""
    base = Path(tempfile.mkdtemp(prefix="stormbuffer-users-"))
    try:
        base.chmod(0o755)
        sandbox = Sandbox.create(base)
        for directory in (base / "work", sandbox.cwd):
            directory.chmod(0o755)
        (base / "tmp").chmod(0o1777)
        link_tree(acquired_models, base / "cache" / "stormbuffer" / "models")
        yield sandbox
    finally:
        shutil.rmtree(base)


def sbuf(box: Sandbox, *args: str, env: Mapping[str, str] | None = None, umask: int = 0o022,
         prefix: tuple[str, ...] = (), input: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        [*prefix, str(SBUF), *args], cwd=box.cwd, env=dict(box.env if env is None else env), umask=umask,
        input=input, stdin=None if input is not None else subprocess.DEVNULL, capture_output=True, text=True,
        check=False,
    )  # fmt: skip


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stderr
    return done


def everything_below(*roots: Path) -> list[Path]:
    return [path for root in roots for path in (root, *root.rglob("*")) if "models" not in path.parts[-3:]]


def test_another_user_reads_nothing_of_the_stores_or_the_cache_whatever_the_umask(
    box: Sandbox, other_user: User
) -> None:
    (box.base / "cache" / "stormbuffer").chmod(0o755)  # made before stores were private: init closes it
    ok(sbuf(box, "init", umask=0))
    ok(sbuf(box, "--project", "init", umask=0))
    ok(sbuf(box, "--project", "add", "--title", "Vault", "--body", f"The password is {SECRET}.", umask=0))
    ok(sbuf(box, "add", "--title", "Global vault", "--body", f"Also {SECRET}.", umask=0))
    ok(sbuf(box, "--project", "search", "password", umask=0))
    ok(sbuf(box, "--project", "invoke", "search", input='{"version": 1, "query": "password"}', umask=0))
    deadline = time.monotonic() + 30  # the call starts a daemon (with its log) for the next one
    while sbuf(box, "daemon", "status").returncode != 0:
        assert time.monotonic() < deadline, "no daemon started"
        time.sleep(0.1)
    ok(sbuf(box, "daemon", "stop"))
    assert (box.base / "cache" / "stormbuffer" / "run" / "daemon.log").is_file()
    stores = [box.global_root, box.project_root, box.base / "cache" / "stormbuffer"]
    for root in stores:
        assert stat.S_IMODE(root.stat().st_mode) == 0o700, root
    found = everything_below(*stores)
    assert any(path.name == "global.sqlite3" for path in found) and any(path.suffix == ".md" for path in found)
    for path in found:
        if path.is_symlink():
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert not mode & 0o077, f"{path.relative_to(box.base)} is {oct(mode)}"
    for path in found:
        if path.is_file() and not path.is_symlink():
            attempt = other_user.run("cat", str(path))
            assert attempt.returncode != 0 and SECRET not in attempt.stdout, path
    assert other_user.run("ls", str(box.project_root)).returncode != 0
    assert other_user.run("ls", str(box.global_root / "records")).returncode != 0


def test_init_closes_the_directories_of_a_store_others_could_enter(box: Sandbox) -> None:
    ok(sbuf(box, "--project", "init"))
    for directory in (box.project_root, box.project_root / "records", box.project_root / "locks"):
        directory.chmod(0o755)  # as a store made before, or checked out by git, may be
    ok(sbuf(box, "--project", "init"))
    for directory in (box.project_root, box.project_root / "records", box.project_root / "locks"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_a_projection_directory_another_user_made_first_is_refused(box: Sandbox, other_user: User) -> None:
    unwritable = box.base / "cache-of-another"  # the cache cannot be written: the projection falls back
    unwritable.mkdir(mode=0o755)
    os.chown(unwritable, other_user.uid, other_user.gid)
    env = box.env_with(XDG_CACHE_HOME=str(unwritable), STORMBUFFER_NO_DAEMON="1")
    dirs = PlatformDirs.from_environ(env)
    initialize_store(global_store(dirs))
    tempfile.tempdir = env["TMPDIR"]
    try:
        trap = fallback_index_dir(global_store(dirs).root)
    finally:
        tempfile.tempdir = None
    assert other_user.run("mkdir", "-m", "777", str(trap)).returncode == 0
    ok(sbuf(box, "add", "--title", "Vault", "--body", f"The password is {SECRET}.", env=env, prefix=tuple(NO_DAC)))
    refused = sbuf(box, "search", "password", env=env, prefix=tuple(NO_DAC))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "refusing the temporary projection directory" in refused.stderr and str(trap) not in refused.stderr
    assert list(trap.iterdir()) == []
    assert other_user.run("rmdir", str(trap)).returncode == 0
    found = ok(sbuf(box, "search", "password", env=env, prefix=tuple(NO_DAC)))
    assert "Vault" in found.stdout
    assert stat.S_IMODE(trap.stat().st_mode) == 0o700 and (trap / "global.sqlite3").is_file()
    assert other_user.run("cat", str(trap / "global.sqlite3")).returncode != 0


EDITOR = "#!/bin/sh\nprintf 'not a record: %s\\n' '" + SECRET + '\' > "$1"\n'


def test_a_drafts_directory_another_user_made_first_is_refused(box: Sandbox, other_user: User) -> None:
    ok(sbuf(box, "init"))
    editor = box.base / "editor.sh"
    editor.write_text(EDITOR)
    editor.chmod(0o755)
    env = box.env_with(HOME=None, USERPROFILE=str(box.base / "home"), EDITOR=str(editor))
    parent = Path(env["TMPDIR"], f"stormbuffer-{os.geteuid()}")  # where drafts go without a home
    planted = parent / "drafts" / "planted.md"
    for step in (["mkdir", "-m", "777", str(parent)], ["mkdir", "-m", "777", str(parent / "drafts")],
                 ["touch", str(planted)], ["chmod", "666", str(planted)]):  # fmt: skip
        assert other_user.run(*step).returncode == 0
    refused = sbuf(box, "add", "--title", "Draft", env=env)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "could not be kept as a draft: refusing the temporary drafts directory" in refused.stderr
    assert [path.name for path in (parent / "drafts").iterdir()] == ["planted.md"] and planted.read_text() == ""
    shutil.rmtree(parent)
    kept = sbuf(box, "add", "--title", "Draft", env=env)
    assert kept.returncode == 1 and "Your text was kept in" in kept.stderr
    (draft,) = (parent / "drafts").iterdir()
    assert SECRET in draft.read_text()
    assert stat.S_IMODE(parent.stat().st_mode) == 0o700 and stat.S_IMODE(draft.stat().st_mode) == 0o600
    assert other_user.run("cat", str(draft)).returncode != 0


@pytest.mark.parametrize("link", ["records", "store"])
def test_a_symlinked_store_or_records_directory_is_refused(box: Sandbox, link: str) -> None:
    ok(sbuf(box, "--project", "init"))
    elsewhere = box.base / "elsewhere"
    if link == "records":
        shutil.move(box.project_root / "records", elsewhere)
        (box.project_root / "records").symlink_to(elsewhere)
    else:
        shutil.move(box.project_root, elsewhere)
        box.project_root.symlink_to(elsewhere)
    before = sorted(path.name for path in elsewhere.rglob("*"))
    added = sbuf(box, "--project", "add", "--title", "Outside", "--body", "Must not land outside the project.")
    assert added.returncode == 1 and "Traceback" not in added.stderr
    what = "records directory" if link == "records" else "store directory"
    assert f"project store's {what} is a symbolic link" in added.stderr
    assert sorted(path.name for path in elsewhere.rglob("*")) == before
    listed = sbuf(box, "--project", "list")
    assert listed.returncode == 1 and "symbolic link" in listed.stderr
    answered = sbuf(box, "--project", "invoke", "search", input='{"version": 1, "query": "outside"}')
    assert answered.returncode == 1 and '"ok":false' in answered.stdout and answered.stderr == ""
    mcp = str(SBUF.parent / "stormbuffer-mcp")
    reason = f"the project store's {what} is a symbolic link; Stormbuffer follows no link into or inside a store"
    for door in ([], ["--no-daemon"]):  # through the daemon and in its own process: the store's reason
        served = subprocess.run([mcp, "--stdio", "--project", *door], cwd=box.cwd, env=box.env, input="",
                                capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert (served.returncode, served.stdout) == (1, "")
        expected = f"stormbuffer-mcp: could not start the stdio adapter: {reason}: replace it with a real directory\n"
        assert served.stderr == expected

"""Running the installed `sbuf` as a real process in a private sandbox, and small file utilities."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import select
import subprocess
import sys
import textwrap
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stormbuffer.conformance.store import link_tree as link_tree  # shared with the kit's throwaway store

SBUF = Path(sys.executable).parent / "sbuf"
ESC = "\x1b"

# Variables that would let the caller's environment leak into a test.
_ISOLATED = (
    "NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE", "VISUAL", "EDITOR", "USERPROFILE", "LOCALAPPDATA", "APPDATA",
    "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "TMPDIR", "STORMBUFFER_TEST_MODE",
    "STORMBUFFER_NO_DAEMON", "STORMBUFFER_DAEMON_IDLE_S",
)  # fmt: skip
# Environments made by `sbuf_env`: the test session stops any daemon one of them started (conftest).
ENVIRONMENTS: dict[Path, dict[str, str]] = {}


def sbuf_env(base: Path, **overrides: str | None) -> dict[str, str]:
    """An environment whose home, data, cache and temp directories live under `base` (so does the
    daemon's runtime directory, in the cache).

    `EDITOR=true` (editing changes nothing), `NO_COLOR` is absent, and `sbuf invoke` checks every
    envelope it prints against `schema/v1` (a mismatch becomes `internal_error` plus a line on
    stderr). Keyword arguments set variables, or remove them when given as None.
    """
    env = {name: value for name, value in os.environ.items() if name not in _ISOLATED}
    dirs = {"HOME": "home", "XDG_DATA_HOME": "data", "XDG_CACHE_HOME": "cache", "TMPDIR": "tmp"}
    for name, folder in dirs.items():
        (base / folder).mkdir(parents=True, exist_ok=True)
        env[name] = str(base / folder)
    env["EDITOR"] = "true"
    env["STORMBUFFER_VALIDATE_OUTPUT"] = "1"  # every protocol envelope is checked against schema/v1
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    ENVIRONMENTS[base] = env
    return env


def run_sbuf(
    *args: str, cwd: Path, env: Mapping[str, str], input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `sbuf args…`; stdin is not a terminal (empty unless `input` is given); output is captured as text."""
    return subprocess.run(
        [str(SBUF), *args],
        cwd=cwd,
        env=dict(env),
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="surrogateescape",
        check=False,
    )


PROJECTION_FILES = ("index.sqlite3", "global.sqlite3", "projection.lock")  # name starts: derived, disposable


def tree_digest(root: Path, *, projection: bool = True) -> dict[str, str]:
    """Relative path → sha256 (or `<dir>`) of everything below `root`, for before/after comparisons;
    the daemon's runtime directory (`stormbuffer/run` in the cache) is not data and is left out, and
    with `projection=False` so are the projections (database, vector matrices, lock)."""
    digest: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if "/stormbuffer/run/" in f"/{relative}/" or (not projection and path.name.startswith(PROJECTION_FILES)):
            continue
        if path.is_symlink():
            digest[relative] = f"<link {os.readlink(path)}>"
        elif path.is_dir():
            digest[relative] = "<dir>"
        else:
            digest[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


def record_markdown(
    record_id: str,
    scope: str,
    *,
    title: str = "A hand-written memory",
    kind: str = "fact",
    status: str = "active",
    access: str = "human",
    created_at: str = "2020-01-02T03:04:05Z",
    updated_at: str = "2020-01-02T03:04:05Z",
    supersedes: tuple[str, ...] = (),
    body: str = "Hand-written body text.\n",
) -> str:
    """Canonical Markdown for one record, written the way a person might write it by hand."""
    listed = ", ".join(f'"{old}"' for old in supersedes)
    return (
        "+++\n"
        "format_version = 1\n"
        f'id = "{record_id}"\n'
        f'title = "{title}"\n'
        f'kind = "{kind}"\n'
        f'scope = "{scope}"\n'
        f'status = "{status}"\n'
        f'access = "{access}"\n'
        f'created_at = "{created_at}"\n'
        f'updated_at = "{updated_at}"\n'
        "tags = []\n"
        "aliases = []\n"
        f"supersedes = [{listed}]\n"
        "\n"
        "[[sources]]\n"
        'kind = "conversation"\n'
        'reference = "hand-written"\n'
        'actor = "human"\n'
        "+++\n"
        "\n"
        f"{body}"
    )


@dataclass
class Sandbox:
    """A private home, data, cache and temp directory, and a project directory to run `sbuf` in."""

    base: Path
    env: dict[str, str]
    cwd: Path

    @classmethod
    def create(cls, base: Path) -> Sandbox:
        cwd = base / "work" / "project"
        cwd.mkdir(parents=True)
        return cls(base, sbuf_env(base), cwd)

    @property
    def global_root(self) -> Path:
        return self.base / "data" / "stormbuffer"

    @property
    def project_root(self) -> Path:
        return self.cwd / ".sbuf"

    def env_with(self, **overrides: str | None) -> dict[str, str]:
        env = dict(self.env)
        for name, value in overrides.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    def sbuf(
        self, *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run_sbuf(*args, cwd=cwd or self.cwd, env=self.env if env is None else env, input=input)


def invoke(
    operation: str,
    request: object,
    *,
    cwd: Path,
    env: Mapping[str, str],
    view: str = "project",
    raw: bytes | None = None,
) -> dict[str, Any]:
    """Run `sbuf --<view> invoke <operation>` with `request` as JSON (or `raw` bytes) on stdin.

    Checks what every invocation must do: exactly one line on stdout holding an envelope valid
    against `schema/v1`, nothing on stderr, exit status 0 exactly when `ok`. Returns the envelope.
    """
    from stormbuffer.protocol.invoke import validate_envelope

    data = raw if raw is not None else json.dumps(request).encode()
    completed = subprocess.run(
        [str(SBUF), f"--{view}", "invoke", operation], cwd=cwd, env=dict(env), input=data, capture_output=True,
        check=False,
    )  # fmt: skip
    assert completed.stderr == b"", completed.stderr.decode(errors="replace")
    assert completed.stdout.endswith(b"\n") and completed.stdout.count(b"\n") == 1, completed.stdout[:500]
    envelope = json.loads(completed.stdout)
    assert validate_envelope(envelope) == []
    assert completed.returncode == (0 if envelope["ok"] else 1)
    return envelope


@contextmanager
def lock_held_elsewhere(lock: Path) -> Iterator[None]:
    """Another process holds `lock` (the store's projection or mutation lock) for the duration."""
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from pathlib import Path
            from stormbuffer.core.locks import exclusive_lock
            with exclusive_lock(Path({str(lock)!r})):
                print("held", flush=True)
                sys.stdin.readline()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.communicate("\n")


def run_at_terminal(
    box: Sandbox,
    args: list[str],
    prompt: bytes | None = None,
    answer: str = "",
    env: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """Run `sbuf` with a pseudo-terminal as stdin, stdout and stderr; answer `prompt` when it appears."""
    master, slave = pty.openpty()
    environ = dict(box.env_with(NO_COLOR="1") if env is None else env)
    process = subprocess.Popen([str(SBUF), *args], cwd=box.cwd, env=environ, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    output = b""
    answered = prompt is None
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        assert ready, f"no output from sbuf: {output!r}"
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal closes when the process exits
            break
        if not chunk:
            break
        output += chunk
        if not answered and prompt is not None and prompt in output:
            os.write(master, answer.encode())
            answered = True
    os.close(master)
    return process.wait(), output.decode(errors="replace")


def editor(box: Sandbox, name: str, code: str) -> str:
    """An executable editor program running Python `code`; `path` is the file it was given."""
    script = box.base / "bin" / name
    script.parent.mkdir(exist_ok=True)
    script.write_text(f"#!{sys.executable}\nimport pathlib, sys\npath = pathlib.Path(sys.argv[1])\n{code}\n")
    script.chmod(0o755)
    return str(script)


def stop_daemons(keep: Collection[Path] = ()) -> list[int]:
    """Stop every daemon that an environment made by `sbuf_env` started, but those of the environments
    made under the bases in `keep` (`sbuf daemon stop`'s way, then SIGKILL if it is still there); the
    process ids of those that were running."""
    import signal

    from stormbuffer.daemon.relay import running, stop
    from stormbuffer.daemon.runtime import Runtime, runtime_directory

    stopped = []
    for base, env in list(ENVIRONMENTS.items()):
        if base in keep:
            continue
        directory = runtime_directory(env)
        if directory is None or not (directory / "daemon.lock").exists():
            continue
        place = Runtime(directory)
        if not running(place):
            continue
        pid = int(place.lock.read_text(encoding="ascii").strip() or 0)
        stop(env)
        if running(place) and pid:
            os.kill(pid, signal.SIGKILL)
        stopped.append(pid)
    return stopped

"""`.agents/skills/stormbuffer-memory/verify.py`: the installation health check, run as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import SBUF, tree_digest

from .conftest import STORMBUFFER_MCP, Store

ROOT = Path(__file__).resolve().parents[2]
VERIFY = ROOT / ".agents" / "skills" / "stormbuffer-memory" / "verify.py"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def verify(store: Store, path: str) -> subprocess.CompletedProcess[str]:
    env = store.box.env_with(PATH=path)
    return subprocess.run(
        [sys.executable, str(VERIFY)], cwd=store.box.cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_passes_with_the_installed_commands_and_leaves_the_users_stores_alone(store: Store) -> None:
    store.seed()
    users_files = ("home", "data", "cache", "work")  # everything but the temporary directory
    before = {name: tree_digest(store.box.base / name) for name in users_files}
    done = verify(store, f"{STORMBUFFER_MCP.parent}:{SYSTEM_PATH}")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "Stormbuffer health check passed: sbuf and stormbuffer-mcp are ready\n"
    assert {name: tree_digest(store.box.base / name) for name in users_files} == before


def test_fails_clearly_without_the_adapter_on_path(store: Store) -> None:
    only_sbuf = store.box.base / "only-sbuf"
    only_sbuf.mkdir()
    (only_sbuf / "sbuf").symlink_to(SBUF)
    done = verify(store, f"{only_sbuf}:{SYSTEM_PATH}")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "Stormbuffer health check failed: stormbuffer-mcp was not found on PATH\n"


def test_fails_clearly_when_the_adapter_does_not_speak_mcp(store: Store) -> None:
    """An adapter that exits at once (here: `stormbuffer-mcp` replaced by `sbuf`) is named with its diagnostic."""
    broken = store.box.base / "broken"
    broken.mkdir()
    (broken / "sbuf").symlink_to(SBUF)
    (broken / "stormbuffer-mcp").symlink_to(SBUF)
    done = verify(store, f"{broken}:{SYSTEM_PATH}")
    assert (done.returncode, done.stdout) == (1, "")
    command = f"{broken / 'stormbuffer-mcp'} --stdio --project"
    assert done.stderr.startswith(f"Stormbuffer health check failed: {command} failed: ")

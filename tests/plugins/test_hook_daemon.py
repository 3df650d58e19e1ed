"""The prompt hook asks a running daemon of its install over the daemon's socket, without starting
`sbuf`; it runs `sbuf` when no daemon serves, when the daemon belongs to another install, or when
the runtime directory is not private. `STORMBUFFER_BIN` names a copy of the `sbuf` script (same
interpreter, so the same install) that notes every start in a log before it runs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from stormbuffer.daemon import relay
from stormbuffer.daemon.runtime import runtime_directory
from tests import tools
from tests.helpers import SBUF, run_sbuf, sbuf_env
from tests.plugins.conftest import PLUGINS, SEED

HOOK = PLUGINS / "codex-plugin-stormbuffer" / "hooks" / "codex.cjs"
TIMEOUT_S = 120  # a guard against a hung process, never a speed assertion


class Box:
    def __init__(self, base: Path) -> None:
        self.work = base / "work"
        self.work.mkdir()
        self.log = base / "sbuf-starts.log"
        self.sbuf_copy = base / "bin" / "sbuf"
        self.sbuf_copy.parent.mkdir()
        interpreter = SBUF.read_text(encoding="utf-8").splitlines()[0]
        self.sbuf_copy.write_text(
            f"{interpreter}\nimport sys\nwith open({str(self.log)!r}, 'a') as log:\n    log.write('started\\n')\n"
            "from stormbuffer.cli import main\nsys.exit(main())\n",
            encoding="utf-8",
        )
        self.sbuf_copy.chmod(0o755)
        self.env = sbuf_env(base, STORMBUFFER_BIN=str(self.sbuf_copy), STORMBUFFER_SCOPE="global")
        self.record_id = ""

    def sbuf(self, *args: str, input: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        return run_sbuf(*args, cwd=self.work, env={**self.env, **env}, input=input)

    def starts(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0

    def prompt_hook(self) -> str:
        """The Codex prompt hook's additional context for a prompt about the seeded memory."""
        event = {"hook_event_name": "UserPromptSubmit", "prompt": "magnetar release freeze", "cwd": str(self.work),
                 "session_id": "s", "turn_id": "t"}  # fmt: skip
        done = subprocess.run(
            [str(tools.node()), str(HOOK), "prompt"], cwd=self.work, env=self.env, input=json.dumps(event),
            capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        output = json.loads(done.stdout)
        return str(output.get("hookSpecificOutput", {}).get("additionalContext", ""))

    def start_daemon(self, **env: str) -> None:
        connection = relay.open_door(relay.hello("status", {**self.env, **env}), {**self.env, **env}, start=True)
        connection.close()

    def wait_for_daemon(self) -> None:
        """Wait (bounded) until the daemon a one-shot `sbuf invoke` started in the background serves."""
        deadline = time.monotonic() + TIMEOUT_S
        while self.sbuf("daemon", "status").returncode != 0:
            assert time.monotonic() < deadline, "no daemon started"
            time.sleep(0.1)

    def runtime(self) -> Path:
        directory = runtime_directory(self.env)
        assert directory is not None
        return directory


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Box:
    box = Box(tmp_path_factory.mktemp("hook-daemon"))
    assert box.sbuf("init").returncode == 0
    remembered = box.sbuf("invoke", "remember", input=json.dumps({"version": 1, **SEED}), STORMBUFFER_NO_DAEMON="1")
    box.record_id = json.loads(remembered.stdout)["result"]["record_id"]
    assert box.sbuf("approve", box.record_id, STORMBUFFER_NO_DAEMON="1").returncode == 0
    return box


def assert_recalled(box: Box, context: str) -> None:
    assert "untrusted evidence from Stormbuffer" in context
    assert box.record_id in context
    assert '"receipt_id":"' in context


def test_a_running_daemon_answers_the_hook_without_starting_sbuf(box: Box) -> None:
    box.start_daemon()
    try:
        identity = box.runtime() / "daemon.identity"
        assert stat.S_IMODE(identity.stat().st_mode) == 0o600
        before = box.starts()
        for _ in range(2):
            assert_recalled(box, box.prompt_hook())
        assert box.starts() == before
    finally:
        box.sbuf("daemon", "stop")
    assert not (box.runtime() / "daemon.identity").exists()


def test_without_a_daemon_the_hook_runs_sbuf(box: Box) -> None:
    box.sbuf("daemon", "stop")
    before = box.starts()
    try:
        assert_recalled(box, box.prompt_hook())
        assert box.starts() == before + 1
    finally:
        box.sbuf("daemon", "stop")  # the one-shot `sbuf invoke context` started one for later prompts


def test_a_daemon_of_another_install_is_left_to_sbuf(box: Box) -> None:
    box.start_daemon(STORMBUFFER_DAEMON_IDLE_S="300")  # another daemon configuration: another identity
    try:
        before = box.starts()
        assert_recalled(box, box.prompt_hook())
        assert box.starts() == before + 1
        box.wait_for_daemon()
        record = json.loads((box.runtime() / "daemon.identity").read_text())
        assert record["idle_s"] == 900.0, "sbuf replaced the daemon with one of its own install"
        assert_recalled(box, box.prompt_hook())
        assert box.starts() == before + 1
    finally:
        box.sbuf("daemon", "stop")


def test_a_refused_hello_falls_back_to_sbuf(box: Box) -> None:
    """An identity file that no longer matches its daemon: the daemon answers `other_install`."""
    box.start_daemon()
    try:
        identity = box.runtime() / "daemon.identity"
        record = json.loads(identity.read_text())
        identity.write_text(json.dumps({**record, "install": record["install"] + " stale"}))
        before = box.starts()
        assert_recalled(box, box.prompt_hook())
        assert box.starts() == before + 1
    finally:
        box.sbuf("daemon", "stop")


def test_a_runtime_directory_others_may_enter_is_never_used(box: Box) -> None:
    box.start_daemon()
    directory = box.runtime()
    try:
        os.chmod(directory, 0o755)
        before = box.starts()
        assert_recalled(box, box.prompt_hook())  # `sbuf` refuses the directory too and answers itself
        assert box.starts() == before + 1
    finally:
        os.chmod(directory, 0o700)
        box.sbuf("daemon", "stop")

"""`sbuf add` and `sbuf list` through a running daemon: the daemon answers them (its `served` count
moves), and everything a person sees is what `sbuf` prints in its own process (`STORMBUFFER_NO_DAEMON=1`)
on the same store: output, errors, warnings, exit status and the record file written."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from stormbuffer.core.codec import parse_markdown
from stormbuffer.daemon import relay
from tests.cli.conftest import sandbox  # noqa: F401 - a fixture shared with the CLI tests
from tests.helpers import Sandbox, lock_held_elsewhere, record_markdown

DRAFT = re.compile(r"draft-[0-9T]+-[0-9]+\.md")
ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def started(box: Sandbox) -> Sandbox:
    """`box` with a project store and a running daemon of its own."""
    assert box.sbuf("--project", "init").returncode == 0
    relay.open_door(relay.hello("status", box.env), box.env, start=True).close()
    return box


def served(box: Sandbox) -> int:
    status = relay.ask("status", box.env)
    assert status is not None, "no daemon runs"
    return int(status["served"])


def both(box: Sandbox, *args: str) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """`sbuf args…` through the daemon (asserting it answered), then in its own process."""
    before = served(box)
    warm = box.sbuf(*args)
    assert served(box) == before + 2, "the daemon did not answer"  # the status call counts once
    alone = box.sbuf(*args, env=box.env_with(STORMBUFFER_NO_DAEMON="1"))
    return warm, alone


def same(warm: subprocess.CompletedProcess[str], alone: subprocess.CompletedProcess[str]) -> None:
    """The same exit status and output (a kept draft's file name holds the process id)."""

    def seen(done: subprocess.CompletedProcess[str]) -> tuple[int, str, str]:
        return done.returncode, done.stdout, DRAFT.sub("draft-*.md", done.stderr)

    assert seen(warm) == seen(alone)


def test_add_through_the_daemon_writes_the_record_sbuf_would(sandbox: Sandbox) -> None:  # noqa: F811
    box = started(sandbox)
    args = ("--project", "add", "--access", "agent", "--kind", "decision", "--title", "Ship on Fridays",
            "--body", "Only with a green build.\n\n- one\n- two")  # fmt: skip
    warm, alone = both(box, *args)
    visible = "Visible to people and coding agents (MCP recall, `sbuf invoke`)\n"
    assert (warm.returncode, warm.stderr) == (0, visible)
    second_copy = f"warning: {alone.stdout.strip()} is identical to active memory {warm.stdout.strip()}; "
    assert (alone.returncode, alone.stderr.startswith(visible + second_copy)) == (0, True)
    written = []
    for done in (warm, alone):
        record_id = done.stdout.strip()
        assert ID.match(record_id)
        path = box.project_root / "records" / f"{record_id}.md"
        assert box.sbuf("--project", "show", record_id).stdout == path.read_text(encoding="utf-8") + "\n"
        record = parse_markdown(path.read_bytes())
        written.append(record.replace(id="-", created_at=None, updated_at=None))
    assert written[0] == written[1]
    assert (written[0].title, written[0].kind, written[0].access, written[0].status) == (
        "Ship on Fridays", "decision", "agent", "active")  # fmt: skip


def test_list_through_the_daemon_prints_what_sbuf_prints(sandbox: Sandbox) -> None:  # noqa: F811
    box = started(sandbox)
    for number in range(5):
        assert box.sbuf("--project", "add", "--title", f"Note {number}", "--body", f"Body {number}.").returncode == 0
    assert box.sbuf("--project", "propose", "--title", "A proposal", "--body", "Maybe.").returncode == 0
    for args in (("--project", "list"), ("--project", "list", "--all"), ("--project", "list", "--json")):
        warm, alone = both(box, *args)
        same(warm, alone)
        assert warm.returncode == 0
    assert len(warm.stdout.strip().splitlines()) == 1  # --json: one line


def test_a_file_written_by_hand_while_the_daemon_is_idle_is_listed(sandbox: Sandbox) -> None:  # noqa: F811
    box = started(sandbox)
    assert box.sbuf("--project", "add", "--title", "First", "--body", "One.").returncode == 0
    assert "First" in box.sbuf("--project", "list").stdout
    scope = parse_markdown(next((box.project_root / "records").glob("*.md")).read_bytes()).scope
    record_id = "0190a000-0000-7000-8000-00000000beef"
    (box.project_root / "records" / f"{record_id}.md").write_text(
        record_markdown(record_id, scope, title="Written by hand"), encoding="utf-8"
    )
    warm, alone = both(box, "--project", "list")
    same(warm, alone)
    assert f"{record_id}\tactive\tfact\t{scope}\tWritten by hand" in warm.stdout


def test_errors_through_the_daemon_are_the_ones_sbuf_reports(sandbox: Sandbox, tmp_path: Path) -> None:  # noqa: F811
    box = started(sandbox)
    records = box.project_root / "records"
    (records / "broken.md").write_text("+++\nnot a record\n", encoding="utf-8")
    warm, alone = both(box, "--project", "list")
    same(warm, alone)
    assert "warning: the store is degraded: records/broken.md is invalid" in warm.stderr
    (records / "broken.md").unlink()

    with lock_held_elsewhere(box.project_root / "locks" / "mutation.lock"):
        args = ("--project", "add", "--lock-wait", "0.2", "--title", "Busy", "--body", "Waits.")
        warm, alone = both(box, *args)
    same(warm, alone)
    assert warm.returncode == 1 and "error: could not add record: store mutation lock is busy" in warm.stderr
    assert not any("Busy" in path.read_text(encoding="utf-8") for path in records.glob("*.md"))

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    warm = box.sbuf("--project", "add", "--title", "Nowhere", "--body", "No store.", cwd=elsewhere)
    alone = box.sbuf("--project", "add", "--title", "Nowhere", "--body", "No store.", cwd=elsewhere,
                     env=box.env_with(STORMBUFFER_NO_DAEMON="1"))  # fmt: skip
    same(warm, alone)
    assert warm.returncode == 1 and "not initialized" in warm.stderr


def test_a_daemon_that_is_gone_leaves_the_command_to_sbuf(sandbox: Sandbox) -> None:  # noqa: F811
    box = started(sandbox)
    assert relay.stop(box.env) is not None
    done = box.sbuf("--project", "add", "--title", "After the daemon", "--body", "Still stored.")
    assert done.returncode == 0, done.stderr
    assert "After the daemon" in box.sbuf("--project", "list").stdout
    assert relay.ask("status", box.env) is None  # a human command starts no daemon

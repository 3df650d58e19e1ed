"""Text typed into the editor is never thrown away: a busy store or invalid text keeps it as a draft,
and at a terminal invalid text can be reopened in the editor (a real editor program set by EDITOR)."""

from __future__ import annotations

import fcntl
import re
from pathlib import Path

from tests.helpers import Sandbox, editor, run_at_terminal

TYPED = "Typed by hand: the release train leaves at noon."


def kept_draft(stderr: str) -> Path:
    found = re.search(r"^Your text was kept in (.+)$", stderr, re.MULTILINE)
    assert found, stderr
    return Path(found.group(1))


def records(sandbox: Sandbox) -> list[str]:
    return sorted(path.name for path in (sandbox.project_root / "records").iterdir())


def test_a_busy_store_keeps_the_typed_text(sandbox: Sandbox) -> None:
    assert sandbox.sbuf("--project", "init").returncode == 0
    typing = editor(
        sandbox, "typing", f"path.write_text(path.read_text().replace('Write the memory here.', {TYPED!r}))"
    )
    lock = sandbox.project_root / "locks" / "mutation.lock"
    lock.parent.mkdir(exist_ok=True)
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        done = sandbox.sbuf("--project", "add", "--title", "T", env=sandbox.env_with(EDITOR=typing))
    assert done.returncode == 1 and "lock is busy" in done.stderr and "Traceback" not in done.stderr
    draft = kept_draft(done.stderr)
    assert TYPED in draft.read_text() and draft.stat().st_mode & 0o777 == 0o600
    assert records(sandbox) == []


def test_invalid_text_from_edit_is_kept_and_the_record_left_alone(sandbox: Sandbox) -> None:
    assert sandbox.sbuf("--project", "init").returncode == 0
    added = sandbox.sbuf("--project", "add", "--title", "Kept", "--body", "Original body.", env=sandbox.env_with())
    record_id = added.stdout.strip()
    before = sandbox.sbuf("--project", "show", record_id).stdout
    breaking = editor(sandbox, "breaking", f"path.write_text(path.read_text().replace('title =', 'title') + {TYPED!r})")
    done = sandbox.sbuf("--project", "edit", record_id, env=sandbox.env_with(EDITOR=breaking))
    assert done.returncode == 1 and "editor output is not a valid record" in done.stderr
    assert TYPED in kept_draft(done.stderr).read_text()
    assert sandbox.sbuf("--project", "show", record_id).stdout == before


def test_a_terminal_offers_to_reopen_the_editor_on_the_same_text(sandbox: Sandbox) -> None:
    assert sandbox.sbuf("--project", "init").returncode == 0
    runs = sandbox.base / "runs"
    # First run: text that is not a record. Second run: the same text comes back, and is fixed.
    fixing = editor(
        sandbox,
        "fixing",
        f"""runs = pathlib.Path({str(runs)!r})
count = int(runs.read_text()) if runs.exists() else 0
runs.write_text(str(count + 1))
text = path.read_text()
if count == 0:
    path.write_text(text.replace('+++', '***', 1).replace('Write the memory here.', {TYPED!r}))
else:
    assert {TYPED!r} in text
    path.write_text(text.replace('***', '+++', 1))""",
    )
    prompt = b"Reopen the editor on the same text? [Y/n]"
    env = sandbox.env_with(EDITOR=fixing)
    code, output = run_at_terminal(sandbox, ["--project", "add", "--title", "Reopened"], prompt, "y\n", env)
    assert code == 0 and prompt.decode() in output, output
    assert runs.read_text() == "2"
    assert "kept in" not in output
    [name] = records(sandbox)
    assert TYPED in (sandbox.project_root / "records" / name).read_text()

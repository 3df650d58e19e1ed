"""Everyday use of `sbuf` as a real process: editors with arguments, what each command says it did,
warnings about a second copy of a memory, errors that name the fix in one `error:` style, Ctrl-C,
and scopes shown by name."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import SBUF, Sandbox, editor, tree_digest

TITLE, BODY = "Deploys need a green build", "Run the suite before tagging."
ID = r"[0-9a-f-]{36}"


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def errors(result: subprocess.CompletedProcess[str], status: int) -> str:
    """The stderr of a command that failed with `status`, whose first line is its `error:` line."""
    assert result.returncode == status, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "Error:" not in result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    return result.stderr


@pytest.fixture
def box(sandbox: Sandbox) -> Sandbox:
    """A sandbox with an initialized project store in a directory named `project`."""
    ok(sandbox.sbuf("--project", "init"))
    return sandbox


def add(box: Sandbox, title: str = TITLE, body: str = BODY) -> str:
    return ok(box.sbuf("--project", "add", "--title", title, "--body", body)).strip()


def records(box: Sandbox) -> dict[str, str]:
    return tree_digest(box.project_root / "records")


# ---- editors ------------------------------------------------------------------------------------


def test_an_editor_command_with_arguments_is_split_as_a_shell_would(box: Sandbox) -> None:
    code = (
        "path = pathlib.Path(sys.argv[-1])\nassert sys.argv[1:-1] == ['--wait', 'a b']\n"
        "path.write_text(path.read_text().replace('Write the memory here.', 'Typed in the editor.'))"
    )
    program = editor(box, "my editor", code)
    env = box.env_with(EDITOR=f"'{program}' --wait 'a b'")
    record_id = ok(box.sbuf("--project", "add", "--title", "Edited", env=env)).strip()
    assert ok(box.sbuf("--project", "show", record_id)).endswith("Typed in the editor.\n")
    missing = box.sbuf("--project", "add", env=box.env_with(EDITOR=f"{box.base}/no-such-editor --wait"))
    assert errors(missing, 1) == (
        "error: could not add record: could not start the record editor `no-such-editor --wait`: "
        "No such file or directory\n"
    )
    failing = box.sbuf("--project", "add", env=box.env_with(VISUAL="false --wait"))
    assert "record editor `false --wait` exited unsuccessfully: exit status: 1" in errors(failing, 1)
    unbalanced = box.sbuf("--project", "add", env=box.env_with(EDITOR="vim 'unclosed"))
    assert "could not read $VISUAL or $EDITOR as a command: No closing quotation" in errors(unbalanced, 1)
    assert ok(box.sbuf("--project", "list")).count("\n") == 1


def test_add_without_an_editor_mentions_body_and_errors_show_no_internal_labels(box: Sandbox) -> None:
    plain = box.env_with(EDITOR=None, VISUAL=None)
    stderr = errors(box.sbuf("--project", "add", "--title", "No body", env=plain), 1)
    assert stderr == (
        "error: could not add record: set $VISUAL or $EDITOR to edit records, "
        "or give the memory's text with --body (and --title)\n"
    )
    blank = errors(box.sbuf("--project", "add", "--title", " ", "--body", "B", env=plain), 1)
    assert blank.startswith("error: could not add record: invalid record: field `title` is invalid: ")
    assert "<" not in blank
    assert records(box) == {}


def test_an_edit_that_changes_nothing_writes_nothing(box: Sandbox) -> None:
    record_id = add(box)
    before = records(box)
    unchanged = box.sbuf("--project", "edit", record_id[-12:])  # EDITOR=true leaves the text as it was
    assert (ok(unchanged), unchanged.stderr) == (f"{record_id}\n", "No changes: nothing was written\n")
    assert records(box) == before


# ---- what commands say -----------------------------------------------------------------------------


def test_reject_says_rejected(box: Sandbox) -> None:
    candidate = ok(box.sbuf("--project", "propose", "--title", "Maybe", "--body", "Perhaps.")).split("\t")[0]
    assert ok(box.sbuf("--project", "reject", candidate)) == f"{candidate}\trejected\tarchived\n"
    assert ok(box.sbuf("--project", "list", "--all")).startswith(f"{candidate}\tarchived\t")


def test_show_ends_with_a_newline(box: Sandbox) -> None:
    record_id = add(box)
    shown = ok(box.sbuf("--project", "show", record_id))
    assert shown.endswith(f"\n\n{BODY}\n") and not shown.endswith("\n\n")
    path = box.project_root / "records" / f"{record_id}.md"
    assert shown == path.read_text().rstrip("\n") + "\n"  # the file's bytes, one newline at the end


def test_adding_a_copy_of_an_active_memory_warns_and_says_how_to_supersede(box: Sandbox) -> None:
    first = add(box)
    added = box.sbuf("--project", "add", "--title", TITLE.upper(), "--body", f"  {BODY}  ")
    second = ok(added).strip()
    assert added.stderr.splitlines()[1] == (
        f"warning: {second} is identical to active memory {first}; both are now active. To keep one, replace "
        f"the other: `sbuf --project supersede {first}` (or `sbuf --project archive {second}`)"
    )
    different = box.sbuf("--project", "add", "--title", TITLE, "--body", "Another body.")
    assert ok(different) and "warning" not in different.stderr


def test_approving_a_possible_overlap_warns_and_says_how_to_supersede(box: Sandbox) -> None:
    active = add(box)
    proposed = ok(box.sbuf("--project", "propose", "--title", TITLE, "--body", "Tag after a green build."))
    candidate, outcome = proposed.strip().split("\t")
    assert outcome == "possible_overlap"
    approved = box.sbuf("--project", "approve", candidate)
    assert ok(approved) == f"{candidate}\taccepted\tactive\n"
    assert approved.stderr == (
        f"warning: {candidate} may overlap active memory {active}; both are now active. To keep one, replace "
        f"the other: `sbuf --project supersede {active}` (or `sbuf --project archive {candidate}`)\n"
    )
    plain = ok(box.sbuf("--project", "propose", "--title", "Unrelated", "--body", "Nothing alike.")).split("\t")[0]
    quiet = box.sbuf("--project", "approve", plain)
    assert ok(quiet) == f"{plain}\taccepted\tactive\n" and quiet.stderr == ""


# ---- errors ---------------------------------------------------------------------------------------


def test_import_collisions_name_the_flag_that_resolves_them(box: Sandbox, tmp_path: Path) -> None:
    ok(box.sbuf("init"))
    ok(box.sbuf("add", "--title", "Global note", "--body", "Kept globally."))
    archive = tmp_path / "global.json"
    ok(box.sbuf("export", str(archive)))
    stderr = errors(box.sbuf("--project", "import", str(archive)), 1)
    assert stderr.startswith("error: could not import canonical records: scope collision requires an explicit policy")
    assert stderr.endswith("; choose one with --on-scope fail|skip|remap (--dry-run shows what each would do)\n")
    ok(box.sbuf("--project", "import", str(archive), "--on-scope", "remap"))
    again = errors(box.sbuf("--project", "import", str(archive), "--on-scope", "remap"), 1)
    assert "collision requires an explicit policy" in again and "choose one with --on-" in again


def test_empty_queries_and_a_zero_limit_are_errors(box: Sandbox) -> None:
    add(box)
    for command in ("search", "context"):
        for query in ("", "   "):
            assert errors(box.sbuf("--project", command, query), 1) == "error: invalid query: must not be empty\n"
    for args in (("search", "deploy", "--limit", "0"), ("context", "deploy", "--limit", "0"),
                 ("context", "deploy", "--budget", "0")):  # fmt: skip
        stderr = errors(box.sbuf("--project", *args), 2)
        assert f"error: invalid value for '{args[2]}': 0 is not in the range x>=1." in stderr
    assert len(json.loads(ok(box.sbuf("--project", "search", "deploy", "--json", "--limit", "1")))) == 1


def test_mistyped_commands_and_options_get_a_suggestion_in_one_error_style(box: Sandbox) -> None:
    typo = errors(box.sbuf("--project", "serch", "deploy"), 2)
    assert typo.splitlines()[0] == "error: unrecognized subcommand 'serch'. Did you mean 'search'?"
    assert "Usage: sbuf [OPTIONS] COMMAND [ARGS]..." in typo and "try 'sbuf --help'" in typo
    assert errors(box.sbuf("frobnicate"), 2).splitlines()[0] == "error: unrecognized subcommand 'frobnicate'"
    option = errors(box.sbuf("--project", "search", "deploy", "--jsn"), 2)
    assert option.splitlines()[0] == "error: no such option '--jsn'. Did you mean '--json'?"
    assert "For more information, try 'sbuf search --help'." in option


def test_forget_names_both_required_flags_at_once(box: Sandbox) -> None:
    record_id = add(box)
    assert errors(box.sbuf("--project", "forget", record_id), 1) == (
        "error: forget requires --destroy for permanent deletion (and --yes when not run at a terminal)\n"
    )
    assert errors(box.sbuf("--project", "forget", record_id, "--yes"), 2).startswith(
        "error: the argument '--yes' requires '--destroy'\n"
    )
    assert ok(box.sbuf("--project", "forget", record_id, "--destroy", "--yes")) == f"Forgot {record_id}\n"


def test_ctrl_c_exits_130(box: Sandbox) -> None:
    """A real SIGINT to `sbuf` while its editor runs: exit 130, nothing written, no temp file left."""
    started = box.base / "editor-started"
    program = editor(box, "slow", f"pathlib.Path({str(started)!r}).touch()\nimport time\ntime.sleep(60)")
    process = subprocess.Popen(
        [str(SBUF), "--project", "add", "--title", "Interrupted"], cwd=box.cwd, env=box.env_with(EDITOR=program),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as at a terminal, even under `nohup`
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not started.exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=30)
    assert (process.returncode, stdout) == (130, "")
    assert "Traceback" not in stderr and "error" not in stderr
    assert records(box) == {}
    assert list(Path(box.env["TMPDIR"]).glob("stormbuffer-edit-*")) == []


# ---- scopes and times -----------------------------------------------------------------------------------


def test_scopes_are_shown_by_name_with_their_id_and_times_to_the_second(box: Sandbox) -> None:
    scope = "project:" + json.loads(ok(box.sbuf("--project", "status", "--json")))["project_id"]
    named = f"project ({scope})"  # the project directory's name, then the scope string
    ok(box.sbuf("init"))
    ok(box.sbuf("add", "--title", "Global deploy rule", "--body", "Deploys wait for a green build everywhere."))
    add(box)
    cards = ok(box.sbuf("--project", "search", "deploy green build"))
    assert f"  Kind: fact  Scope: {named}\n" in cards and "  Kind: fact  Scope: global\n" in cards
    context = ok(box.sbuf("--project", "context", "deploy green build", "--text"))
    assert f"  Scope: {named}\n" in context
    ok(box.sbuf("--project", "propose", "--title", "Candidate", "--body", "A candidate."))
    inbox = ok(box.sbuf("--project", "inbox"))
    assert re.search(rf"^{ID} \| fact \| {re.escape(named)} \| Candidate \| 0 days$", inbox, re.M)
    machine = json.loads(ok(box.sbuf("--project", "search", "deploy green build", "--json")))
    assert {hit["scope"] for hit in machine} == {scope, "global"}
    assert re.search(r"^Last sync: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", ok(box.sbuf("--project", "status")), re.M)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z",
                        json.loads(ok(box.sbuf("--project", "status", "--json")))["last_successful_sync"])  # fmt: skip

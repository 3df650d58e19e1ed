"""`sbuf` store and record commands, run as real processes: init, root, status, the record lifecycle,
the editor protocol, colour, usage errors, malformed records and store isolation."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ESC, Sandbox, editor, record_markdown, run_at_terminal, tree_digest

SOME_ID = "01890a5d-ac96-774b-bcce-b302099a8057"
OTHER_ID = "01890a5d-ac96-774b-bcce-b302099a8058"
SHARED_RULES = "*\n!.gitignore\n!store.toml\n!records/\n!records/**/\n!records/**/*.md\n"


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def failed(result: subprocess.CompletedProcess[str]) -> str:
    """The single `error:` line of a failed command (exit 1, no traceback)."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def failed_keeping_draft(result: subprocess.CompletedProcess[str]) -> tuple[str, list[str]]:
    """The `error:` line of a failed command, and the `Your text was kept in …` lines printed before it."""
    kept = [line for line in result.stderr.splitlines() if line.startswith("Your text was kept in ")]
    result.stderr = "".join(f"{line}\n" for line in result.stderr.splitlines() if line not in kept)
    return failed(result), kept


def project_scope(sandbox: Sandbox) -> str:
    return "project:" + json.loads(ok(sandbox.sbuf("--project", "status", "--json")))["project_id"]


def add(sandbox: Sandbox, *args: str, title: str = "A durable fact", body: str = "Durable body text.") -> str:
    record_id = ok(sandbox.sbuf("--project", "add", "--title", title, "--body", body, *args)).strip()
    assert re.fullmatch(r"[0-9a-f-]{36}", record_id)
    return record_id


def propose(sandbox: Sandbox, title: str, body: str) -> tuple[str, str]:
    record_id, outcome = (
        ok(sandbox.sbuf("--project", "propose", "--title", title, "--body", body)).rstrip("\n").split("\t")
    )
    return record_id, outcome


def temp_leftovers(sandbox: Sandbox) -> list[str]:
    return sorted(path.name for path in Path(sandbox.env["TMPDIR"]).iterdir())


# ---- process conventions --------------------------------------------------------------------------


def test_no_arguments_prints_help_on_stderr_and_exits_2(sandbox: Sandbox) -> None:
    result = sandbox.sbuf()
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Usage: sbuf" in result.stderr and "init" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--global", "--project", "status"),
        ("--project", "status", "--local"),
        ("--shared", "init"),
        ("--project", "status", "extra"),
        ("--project", "forget", SOME_ID, "--yes"),
        ("--project", "list", "--colour", "always"),
    ],
)
def test_usage_errors_exit_2_and_create_nothing(sandbox: Sandbox, args: tuple[str, ...]) -> None:
    result = sandbox.sbuf(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not sandbox.global_root.exists() and not sandbox.project_root.exists()


# ---- init, root, status -----------------------------------------------------------------------------


def test_project_init_creates_the_store_once(sandbox: Sandbox) -> None:
    root = sandbox.project_root.resolve()
    first = ok(sandbox.sbuf("--project", "init"))
    assert first.splitlines()[0] == f"Initialized project store at {root}"
    config = (sandbox.project_root / "store.toml").read_bytes()
    assert b'scope = "project"' in config and b'visibility = "private"' in config
    assert (sandbox.project_root / ".gitignore").read_text() == "*\n!.gitignore\n"
    again = ok(sandbox.sbuf("--project", "init"))
    assert again.splitlines()[0] == f"Already initialized project store at {root}"
    assert (sandbox.project_root / "store.toml").read_bytes() == config


def test_init_reports_each_invalid_record_and_fails(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    records = sandbox.project_root / "records"
    (records / f"{SOME_ID}.md").write_text("not a record")
    (records / "nested").mkdir()
    (records / "nested" / "other.md").write_text("+++\nformat_version = 1\n+++\n\nbody")
    config = (sandbox.project_root / "store.toml").read_bytes()
    result = sandbox.sbuf("--project", "init")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        f"invalid canonical record {SOME_ID}.md",
        "invalid canonical record nested/other.md",
    ]
    assert all(line.startswith("error: ") and str(sandbox.base) not in line for line in lines)
    assert result.stdout.startswith("Already initialized project store")
    assert (sandbox.project_root / "store.toml").read_bytes() == config


def test_global_init_does_not_mention_visibility(sandbox: Sandbox) -> None:
    out = ok(sandbox.sbuf("-g", "init"))
    assert out.startswith(f"Initialized global store at {sandbox.global_root}")
    assert "private" not in out
    assert (sandbox.global_root / "store.toml").is_file()
    assert not sandbox.project_root.exists()


def test_shared_global_init_fails_before_creating_anything(sandbox: Sandbox) -> None:
    line = failed(sandbox.sbuf("init", "--shared"))
    assert line == "error: could not initialize store: shared stores require project scope"
    assert not sandbox.global_root.exists()


def test_shared_project_init(sandbox: Sandbox) -> None:
    assert "(shared)" in ok(sandbox.sbuf("--project", "init", "--shared")).splitlines()[0]
    gitignore = (sandbox.project_root / ".gitignore").read_text()
    assert gitignore.endswith(SHARED_RULES) and gitignore.startswith("# ")
    assert "Visibility: shared" in ok(sandbox.sbuf("--project", "status")).splitlines()
    assert '"visibility":"shared"' in ok(sandbox.sbuf("--project", "status", "--json"))


def test_shared_init_on_a_private_store_is_refused(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    line = failed(sandbox.sbuf("--project", "init", "--shared"))
    assert line.endswith("store is already private; explicit shared initialization requires a shared store")


def test_root_prints_the_resolved_root_without_creating_it(sandbox: Sandbox) -> None:
    assert ok(sandbox.sbuf("--project", "root")) == f"{sandbox.project_root.resolve()}\n"
    assert ok(sandbox.sbuf("root")) == f"{sandbox.global_root}\n"
    assert not sandbox.project_root.exists() and not sandbox.global_root.exists()
    nested = sandbox.cwd / "src" / "deep"
    nested.mkdir(parents=True)
    ok(sandbox.sbuf("--project", "init"))
    assert ok(sandbox.sbuf("--local", "root", cwd=nested)) == f"{sandbox.project_root.resolve()}\n"


def test_status_of_an_uninitialized_store(sandbox: Sandbox) -> None:
    lines = ok(sandbox.sbuf("--project", "status")).splitlines()
    assert lines[:4] == [
        "View: project with applicable global memory",
        "Scope: project",
        f"Root: {sandbox.project_root.resolve()}",
        "State: not initialized",
    ]
    assert lines[4] == "Records: 0" and lines[-2:] == ["Last sync: never", "Vectors: complete"]
    report = json.loads(ok(sandbox.sbuf("--local", "status", "--json")))
    assert (report["view"], report["scope"], report["initialized"]) == ("strict local", "local", False)
    assert report["visibility"] is None and report["project_id"] is None and report["index_version"] is None
    assert not sandbox.project_root.exists()


def test_status_reports_identity_counts_and_disk_usage(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    kept = add(sandbox)
    archived = add(sandbox, title="Soon archived")
    ok(sandbox.sbuf("--project", "archive", archived))
    propose(sandbox, "A candidate", "Candidate body.")
    ok(sandbox.sbuf("--project", "supersede", kept, "--title", "Replacement"))
    (sandbox.project_root / "tmp").mkdir()
    (sandbox.project_root / "tmp" / "stale").write_bytes(b"x" * 100)

    raw = ok(sandbox.sbuf("--project", "status", "--json"))
    assert raw.endswith("}\n") and ": " not in raw and ", " not in raw
    report = json.loads(raw)
    assert list(report) == sorted(report)
    assert set(report) == {
        "disk_usage", "embedding_version", "index_version", "initialized", "last_successful_sync", "lifecycle",
        "project_id", "project_name", "record_count", "root", "scope", "vectors_pending", "view", "visibility",
    }  # fmt: skip
    assert isinstance(report["vectors_pending"], int) and report["disk_usage"]["reclaimable_bytes"] >= 0
    assert report["lifecycle"] == {"active": 1, "archived": 1, "candidate": 1, "superseded": 1}
    assert report["record_count"] == 4
    assert (report["initialized"], report["visibility"], report["project_name"]) == (True, "private", "project")
    records = sandbox.project_root / "records"
    canonical = (sandbox.project_root / "store.toml").stat().st_size
    canonical += sum(path.stat().st_size for path in records.rglob("*") if path.is_file())
    assert report["disk_usage"]["canonical_bytes"] == canonical
    index_files = [p for p in sandbox.project_root.iterdir() if p.name.startswith("index.sqlite3")]
    index_files += [p for p in sandbox.project_root.iterdir() if p.name == "projection.lock"]
    disposable = 100 + sum(p.stat().st_size for p in (sandbox.project_root / "locks").rglob("*") if p.is_file())
    disposable += sum(p.stat().st_size for p in index_files)
    assert report["disk_usage"]["disposable_bytes"] == disposable
    has_index = (sandbox.project_root / "index.sqlite3").is_file()
    assert isinstance(report["index_version"], int) if has_index else report["index_version"] is None

    lines = ok(sandbox.sbuf("--project", "status")).splitlines()
    assert f"Project ID: {report['project_id']}" in lines and "Project name: project" in lines
    assert ["Records: 4", "Candidates: 1", "Active: 1", "Superseded: 1", "Archived: 1"] == lines[7:12]
    assert lines[12] == f"Canonical disk: {canonical} bytes"
    assert lines[13] == f"Disposable disk: {disposable} bytes"
    assert [line.split(":")[0] for line in lines[14:]] == [
        "Reclaimable disk", "Index version", "Embedding version", "Last sync", "Vectors",
    ]  # fmt: skip


def test_global_status_json(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("init"))
    report = json.loads(ok(sandbox.sbuf("status", "--json")))
    assert (report["view"], report["scope"], report["initialized"]) == ("global", "global", True)
    assert report["project_id"] is None and report["project_name"] is None
    assert report["root"] == str(sandbox.global_root)


def test_directory_rename_keeps_the_project_identity(sandbox: Sandbox) -> None:
    before = sandbox.base / "work" / "alpha"
    before.mkdir()
    ok(sandbox.sbuf("--project", "init", cwd=before))
    identity = json.loads(ok(sandbox.sbuf("--project", "status", "--json", cwd=before)))
    listed = ok(sandbox.sbuf("--project", "add", "--title", "Renamed", "--body", "Still here.", cwd=before))
    line = ok(sandbox.sbuf("--project", "list", cwd=before))
    after = before.rename(sandbox.base / "work" / "beta")
    moved = json.loads(ok(sandbox.sbuf("--project", "status", "--json", cwd=after)))
    assert moved["project_id"] == identity["project_id"] and moved["project_name"] == "alpha"
    assert moved["root"] == str((after / ".sbuf").resolve())
    assert ok(sandbox.sbuf("--project", "list", cwd=after)) == line
    assert line.split("\t")[0] == listed.strip() and line.split("\t")[3] == f"project:{identity['project_id']}"


# ---- uninitialized stores and early failures ----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("add", "--title", "T", "--body", "B"), "could not add record: store is not initialized"),
        (("propose", "--title", "T", "--body", "B"), "could not propose record: store is not initialized"),
        (("list",), "could not list records: store is not initialized"),
        (("show", SOME_ID), "could not read record: store is not initialized"),
        (("approve", SOME_ID), "could not update candidate: store is not initialized"),
        (("reject", SOME_ID), "could not update candidate: store is not initialized"),
        (("edit", SOME_ID), "could not find record: store is not initialized"),
        (("supersede", SOME_ID), "could not find record to supersede: store is not initialized"),
        (("archive", SOME_ID), "could not change record lifecycle: store is not initialized"),
        (("restore", SOME_ID), "could not change record lifecycle: store is not initialized"),
        (("forget", SOME_ID, "--destroy", "--yes"), "could not permanently delete record: store is not initialized"),
        (("inbox",), "could not review candidates: store is not initialized"),
        (("audit",), "could not audit store: store is not initialized"),
    ],
)
@pytest.mark.parametrize("view", ["--project", "--global"])
def test_commands_on_an_uninitialized_store_create_nothing(
    sandbox: Sandbox, view: str, args: tuple[str, ...], message: str
) -> None:
    result = sandbox.sbuf(view, *args)
    init = "sbuf init" if view == "--global" else "sbuf --project init"
    assert failed(result) == f"error: {message}; run `{init}`"
    assert result.stdout == ""
    assert not sandbox.project_root.exists() and not sandbox.global_root.exists()


def test_forget_requires_destroy_before_anything_else(sandbox: Sandbox) -> None:
    result = sandbox.sbuf("--project", "forget", "memory-id")
    assert (
        failed(result)
        == "error: forget requires --destroy for permanent deletion (and --yes when not run at a terminal)"
    )
    assert not sandbox.project_root.exists()


@pytest.mark.parametrize(
    ("record_id", "message"),
    [
        ("not-a-uuid", "must be a valid UUID"),
        ("00000000-0000-0000-0000-000000000000", "must not be the nil UUID"),
        (f" {SOME_ID}", "must be a non-empty UUID without surrounding whitespace"),
    ],
)
@pytest.mark.parametrize("command", ["show", "approve", "reject", "edit", "supersede", "archive", "restore"])
def test_bad_record_ids_are_refused_before_the_store_is_opened(
    sandbox: Sandbox, command: str, record_id: str, message: str
) -> None:
    assert failed(sandbox.sbuf("--project", command, record_id)).startswith(
        f"error: invalid ID `{record_id}`: {message} (or a unique prefix or suffix of a memory's id"
    )
    assert not sandbox.project_root.exists()


# ---- the record lifecycle -------------------------------------------------------------------------------


def test_record_lifecycle(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    scope = project_scope(sandbox)
    record_id = add(sandbox, "--kind", "fact")
    assert ok(sandbox.sbuf("--project", "list")) == f"{record_id}\tactive\tfact\t{scope}\tA durable fact\n"

    shown = ok(sandbox.sbuf("--project", "show", record_id))
    assert shown == (sandbox.project_root / "records" / f"{record_id}.md").read_text() + "\n"
    assert shown.endswith("\n\nDurable body text.\n")
    assert 'reference = "stormbuffer:cli"\nactor = "human"' in shown and 'access = "human"' in shown

    assert ok(sandbox.sbuf("--project", "edit", record_id)) == f"{record_id}\n"
    assert ok(sandbox.sbuf("--project", "archive", record_id)) == f"{record_id}\tarchived\n"
    assert ok(sandbox.sbuf("--project", "list")) == ""
    assert f"{record_id}\tarchived\t" in ok(sandbox.sbuf("--project", "list", "--all"))
    line = failed(sandbox.sbuf("--project", "archive", record_id))
    assert line.endswith(f"record {record_id} is archived, not active")
    assert ok(sandbox.sbuf("--project", "restore", record_id)) == f"{record_id}\tactive\n"
    line = failed(sandbox.sbuf("--project", "restore", record_id))
    assert line == (f"error: could not change record lifecycle: record {record_id} is active, not archived")

    new_id = ok(sandbox.sbuf("--project", "supersede", record_id, "--kind", "decision")).strip()
    assert new_id != record_id
    listed = ok(sandbox.sbuf("--project", "list"))
    assert listed == f"{new_id}\tactive\tdecision\t{scope}\tA durable fact\n"
    assert f"{record_id}\tsuperseded\tfact" in ok(sandbox.sbuf("--project", "list", "--all"))
    assert f'supersedes = ["{record_id}"]' in ok(sandbox.sbuf("--project", "show", new_id))

    line = failed(sandbox.sbuf("--project", "forget", new_id, "--destroy"))
    assert line == "error: noninteractive deletion requires --yes"
    assert ok(sandbox.sbuf("--project", "forget", new_id, "--destroy", "--yes")) == f"Forgot {new_id}\n"
    assert not (sandbox.project_root / "records" / f"{new_id}.md").exists()
    line = failed(sandbox.sbuf("--project", "show", new_id))
    assert line == f"error: could not read record: record {new_id} was not found"


def test_missing_records_are_reported(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    missing = f"record {SOME_ID} was not found"
    assert failed(sandbox.sbuf("--project", "edit", SOME_ID)) == f"error: could not find record: {missing}"
    line = failed(sandbox.sbuf("--project", "supersede", SOME_ID))
    assert line == f"error: could not find record to supersede: {missing}"
    line = failed(sandbox.sbuf("--project", "forget", SOME_ID, "--destroy", "--yes"))
    assert line == f"error: could not permanently delete record: {missing}"


def test_proposals_and_decisions(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    candidate, outcome = propose(sandbox, "Proposed fact", "Proposed body.")
    assert outcome == "requires_approval"
    text = ok(sandbox.sbuf("--project", "show", candidate))
    assert 'status = "candidate"' in text and 'access = "agent"' in text
    assert 'reference = "stormbuffer:cli/propose"\nactor = "agent"' in text
    assert propose(sandbox, "Proposed  FACT", "proposed   body.")[1] == "duplicate_of"
    overlap, outcome = propose(sandbox, "Proposed fact", "A different body.")
    assert outcome == "possible_overlap"

    assert ok(sandbox.sbuf("--project", "approve", candidate)) == f"{candidate}\taccepted\tactive\n"
    line = failed(sandbox.sbuf("--project", "approve", candidate))
    assert line == (f"error: could not update candidate: record {candidate} is active, not a candidate")
    assert ok(sandbox.sbuf("--project", "reject", overlap)) == f"{overlap}\trejected\tarchived\n"

    twin, _ = propose(sandbox, "Twin", "Same words.")
    add(sandbox, title="Twin", body="Same words.")
    assert ok(sandbox.sbuf("--project", "approve", twin)) == f"{twin}\tduplicate_of\tcandidate\n"
    assert f"{twin}\tcandidate\t" in ok(sandbox.sbuf("--project", "list", "--all"))


def test_a_proposal_without_provenance_is_reported_invalid(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    infer = editor(
        sandbox, "infer", "path.write_text(path.read_text().replace('actor = \"agent\"', 'actor = \"inference\"'))"
    )
    result = sandbox.sbuf("--project", "propose", "--body", "Guessed.", env=sandbox.env_with(EDITOR=infer))
    record_id, outcome = result.stdout.rstrip("\n").split("\t")
    assert outcome == "invalid"
    assert "unsupported inference cannot be used as provenance" in failed(result)
    assert not (sandbox.project_root / "records" / f"{record_id}.md").exists()


def test_approving_a_replacement_candidate_supersedes_the_old_record(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    scope = project_scope(sandbox)
    old = add(sandbox, title="Old fact", body="Old body.")
    records = sandbox.project_root / "records"
    (records / f"{SOME_ID}.md").write_text(
        record_markdown(SOME_ID, scope, title="New fact", status="candidate", access="agent", supersedes=(old,))
    )
    assert ok(sandbox.sbuf("--project", "approve", SOME_ID)) == f"{SOME_ID}\taccepted\tactive\n"
    listed = ok(sandbox.sbuf("--project", "list", "--all"))
    assert f"{old}\tsuperseded\t" in listed and f"{SOME_ID}\tactive\t" in listed


def test_bad_kinds(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    reason = "must be one of fact, decision, procedure, or checkpoint"
    assert failed(sandbox.sbuf("--project", "add", "--kind", "opinion")) == f"error: invalid memory kind: {reason}"
    assert failed(sandbox.sbuf("--project", "propose", "--kind", "x")) == f"error: invalid memory kind: {reason}"
    record_id = add(sandbox)
    line = failed(sandbox.sbuf("--project", "supersede", record_id, "--kind", "x"))
    assert line == f"error: invalid replacement kind: {reason}"
    assert ok(sandbox.sbuf("--project", "list")).count("\n") == 1


def test_defaults_of_an_unedited_draft(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    record_id = ok(sandbox.sbuf("--project", "add")).strip()
    text = ok(sandbox.sbuf("--project", "show", record_id))
    assert 'title = "Untitled memory"' in text and 'kind = "fact"' in text
    assert text.endswith("+++\n\nWrite the memory here.\n")


def test_titles_are_printed_on_one_line(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    record_id = add(sandbox, title="Project\u202e collision\u2028card\u200f")
    line = ok(sandbox.sbuf("--project", "list"))
    assert line.endswith("\tProject collision card\n")
    assert "\u202e" not in line and "\u2028" not in line and line.count("\t") == 4
    assert 'title = "Project\u202e collision\u2028card\u200f"' in ok(sandbox.sbuf("--project", "show", record_id))


# ---- the editor ------------------------------------------------------------------------------------------


def test_visual_wins_over_editor_and_gets_one_temp_file(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    log = sandbox.base / "argv.json"
    visual = editor(
        sandbox,
        "retitle",
        f"pathlib.Path({str(log)!r}).write_text(__import__('json').dumps(sys.argv))\n"
        "path.write_text(path.read_text().replace('Untitled memory', 'Written in the editor'))",
    )
    record_id = ok(sandbox.sbuf("--project", "add", env=sandbox.env_with(VISUAL=visual))).strip()
    scope = project_scope(sandbox)
    assert ok(sandbox.sbuf("--project", "list")) == f"{record_id}\tactive\tfact\t{scope}\tWritten in the editor\n"
    argv = json.loads(log.read_text())
    assert len(argv) == 2
    temp = Path(argv[1])
    assert temp.parent == Path(sandbox.env["TMPDIR"])
    assert re.fullmatch(r"stormbuffer-edit-\d+-\d+\.md", temp.name)
    assert temp_leftovers(sandbox) == []


def test_edit_saves_the_edited_record(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    record_id = add(sandbox)
    before = ok(sandbox.sbuf("--project", "show", record_id))
    rewrite = editor(sandbox, "rebody", "path.write_text(path.read_text().replace('Durable body', 'Edited body'))")
    assert ok(sandbox.sbuf("--project", "edit", record_id, env=sandbox.env_with(EDITOR=rewrite))) == f"{record_id}\n"
    after = ok(sandbox.sbuf("--project", "show", record_id))
    assert after.endswith("Edited body text.\n")
    updated = [line for line in after.splitlines() if line.startswith("updated_at")]
    assert updated != [line for line in before.splitlines() if line.startswith("updated_at")]


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("sys.exit(3)", "record editor `broken` exited unsuccessfully: exit status: 3"),
        ("path.write_text('no frontmatter')", "editor output is not a valid record: "),
        ("path.unlink()", "could not add record: "),
    ],
)
def test_editor_failures_write_nothing_and_leave_no_temp_file(sandbox: Sandbox, code: str, message: str) -> None:
    ok(sandbox.sbuf("--project", "init"))
    before = tree_digest(sandbox.project_root)
    program = editor(sandbox, "broken", code)
    line, kept = failed_keeping_draft(
        sandbox.sbuf("--project", "add", "--body", "B", env=sandbox.env_with(EDITOR=program))
    )
    assert len(kept) == (1 if "write_text" in code else 0)
    assert line.startswith("error: could not add record: ") and message in line
    assert sandbox.env["TMPDIR"] not in line
    assert tree_digest(sandbox.project_root) == before
    assert temp_leftovers(sandbox) == []


def test_edit_cannot_change_the_status(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    record_id = add(sandbox)
    before = tree_digest(sandbox.project_root / "records")  # the projection may be brought up to date
    demote = editor(sandbox, "demote", "path.write_text(path.read_text().replace('\"active\"', '\"candidate\"'))")
    line, kept = failed_keeping_draft(sandbox.sbuf("--project", "edit", record_id, env=sandbox.env_with(EDITOR=demote)))
    assert line == (
        f"error: could not save edited record: record {record_id} must stay active; it cannot be made candidate"
    )
    assert len(kept) == 1
    assert tree_digest(sandbox.project_root / "records") == before


def test_without_an_editor_options_are_enough_but_editing_needs_one(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    plain = sandbox.env_with(EDITOR=None, VISUAL=None)
    record_id = ok(sandbox.sbuf("--project", "add", "--title", "Scripted", "--body", "No editor.", env=plain)).strip()
    assert ok(sandbox.sbuf("--project", "show", record_id)).endswith("\n\nNo editor.\n")
    assert ok(sandbox.sbuf("--project", "supersede", record_id, "--title", "Scripted again", env=plain)).strip()
    assert "\tScripted again\n" in ok(sandbox.sbuf("--project", "list"))
    needs_editor = "set $VISUAL or $EDITOR to edit records, or give the memory's text with --body (and --title)"
    assert failed(sandbox.sbuf("--project", "add", "--title", "Only a title", env=plain)).endswith(needs_editor)
    assert failed(sandbox.sbuf("--project", "propose", env=plain)).endswith(needs_editor)
    line = failed(sandbox.sbuf("--project", "add", "--title", " padded", "--body", "B", env=plain))
    assert line == (
        "error: could not add record: invalid record: field `title` is invalid: "
        "must be non-empty and have no surrounding whitespace"
    )


# ---- forgetting at a terminal ------------------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "deleted"), [("YES\n", True), ("y\n", True), ("n\n", False), ("\n", False)])
def test_forget_asks_at_a_terminal(sandbox: Sandbox, answer: str, deleted: bool) -> None:
    ok(sandbox.sbuf("--project", "init"))
    record_id = add(sandbox, title="Bidi\u202e title")
    code, output = run_at_terminal(sandbox, ["--project", "forget", record_id, "--destroy"], b"[y/N] ", answer)
    assert f"Permanently delete Bidi title ({record_id})? [y/N] " in output
    path = sandbox.project_root / "records" / f"{record_id}.md"
    if deleted:
        assert code == 0 and f"Forgot {record_id}" in output and not path.exists()
    else:
        assert code == 1 and "deletion cancelled" in output and path.exists()


# ---- colour ----------------------------------------------------------------------------------------------------


def test_colour_always_uses_the_exact_sequences(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init"))
    for args in (("--color", "always", "--project", "status"), ("--project", "status", "--color", "always")):
        out = ok(sandbox.sbuf(*args))
        assert f"{ESC}[1m{ESC}[36mScope{ESC}[39m{ESC}[0m: project" in out
        assert f"{ESC}[1m{ESC}[32minitialized{ESC}[39m{ESC}[0m" in out
        assert f"{ESC}[4m{ESC}[96m{sandbox.project_root.resolve()}{ESC}[39m{ESC}[0m" in out
    init = ok(sandbox.sbuf("--color", "always", "--project", "init"))
    assert init.startswith(f"{ESC}[1m{ESC}[32mAlready initialized{ESC}[39m{ESC}[0m project store at {ESC}[4m{ESC}[96m")


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--color", "always", "--project", "status"), {"NO_COLOR": "1"}),
        (("--color", "always", "--project", "status"), {"NO_COLOR": ""}),
        (("--project", "status"), {}),
        (("--color", "auto", "--project", "init"), {}),
        (("--color", "never", "--project", "status"), {}),
        (("--color", "always", "--project", "status", "--json"), {}),
    ],
)
def test_no_colour_when_disabled_piped_or_machine_readable(
    sandbox: Sandbox, args: tuple[str, ...], env: dict[str, str]
) -> None:
    ok(sandbox.sbuf("--project", "init"))
    out = ok(sandbox.sbuf(*args, env=sandbox.env_with(**env)))
    assert ESC not in out
    if "--json" in args:
        assert out.startswith("{")


def test_error_prefix_colour(sandbox: Sandbox) -> None:
    coloured = sandbox.sbuf("--color", "always", "--project", "add")
    assert coloured.returncode == 1
    assert coloured.stderr == (
        f"{ESC}[1m{ESC}[91merror{ESC}[39m{ESC}[0m: could not add record: "
        "store is not initialized; run `sbuf --project init`\n"
    )
    plain = sandbox.sbuf("--color", "always", "--project", "add", env=sandbox.env_with(NO_COLOR="1"))
    assert failed(plain) == "error: could not add record: store is not initialized; run `sbuf --project init`"


# ---- malformed records ----------------------------------------------------------------------------------------


def _malformed(scope: str) -> dict[str, tuple[bytes, str]]:
    good = record_markdown(OTHER_ID, scope)
    return {
        "bad TOML": (good.replace('kind = "fact"', "kind = fact").encode(), "frontmatter TOML is invalid"),
        "unknown field": (
            good.replace("format_version = 1\n", 'format_version = 1\ncolour = "red"\n').encode(),
            "unknown field `colour`",
        ),
        "bad enum": (good.replace('status = "active"', 'status = "deleted"').encode(), "field `status` is invalid"),
        "updated before created": (
            record_markdown(OTHER_ID, scope, updated_at="2019-01-01T00:00:00Z").encode(),
            "field `updated_at` is invalid",
        ),
        "duplicate supersedes": (
            record_markdown(OTHER_ID, scope, supersedes=(SOME_ID, SOME_ID)).encode(),
            "field `supersedes` is invalid",
        ),
        "control character in title": (
            record_markdown(OTHER_ID, scope, title="bell\\u0007title").encode(),
            "field `title` is invalid",
        ),
        "empty body": (record_markdown(OTHER_ID, scope, body=" \n").encode(), "field `body` is invalid"),
        "not UTF-8": (good.encode().replace(b"Hand-written body", b"\xff\xfe body"), "not valid UTF-8"),
    }


@pytest.mark.parametrize(
    "defect",
    [
        "bad TOML",
        "unknown field",
        "bad enum",
        "updated before created",
        "duplicate supersedes",
        "control character in title",
        "empty body",
        "not UTF-8",
    ],
)
def test_a_malformed_record_file_degrades_reads_and_is_never_served(sandbox: Sandbox, defect: str) -> None:
    ok(sandbox.sbuf("--project", "init"))
    add(sandbox)
    propose(sandbox, "Waiting", "Candidate body.")
    data, reason = _malformed(project_scope(sandbox))[defect]
    bad = sandbox.project_root / "records" / f"{OTHER_ID}.md"
    bad.write_bytes(data)
    before = tree_digest(sandbox.project_root / "records")
    shown = sandbox.sbuf("--project", "show", OTHER_ID)  # the invalid file itself is never served
    line = failed(shown)
    assert line.startswith(f"error: could not read record: invalid record {OTHER_ID}.md: ") and reason in line, line
    assert shown.stdout == ""
    for args in (("list",), ("inbox",), ("audit",), ("status",)):  # the other records answer
        result = sandbox.sbuf("--project", *args)
        assert result.returncode == 0, result.stderr
        said = result.stdout + result.stderr
        assert f"records/{OTHER_ID}.md" in said and "Traceback" not in said, said
    assert tree_digest(sandbox.project_root / "records") == before  # the invalid file included


# ---- store isolation ------------------------------------------------------------------------------------------------


def test_local_never_reads_the_global_store(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("init"))
    (sandbox.global_root / "store.toml").write_text("format_version = [broken\n")
    (sandbox.global_root / "records" / "bad.md").write_text("not a record")
    assert failed(sandbox.sbuf("list")).startswith("error: could not list records: store.toml is invalid")
    ok(sandbox.sbuf("--local", "init"))
    record_id = ok(sandbox.sbuf("--local", "add", "--title", "Local only", "--body", "Local body.")).strip()
    assert ok(sandbox.sbuf("--local", "list")).startswith(f"{record_id}\tactive\tfact\tproject:")
    candidate = ok(sandbox.sbuf("--local", "propose", "--body", "Local candidate.")).split("\t")[0]
    assert ok(sandbox.sbuf("--local", "approve", candidate)) == f"{candidate}\taccepted\tactive\n"
    report = json.loads(ok(sandbox.sbuf("--local", "status", "--json")))
    assert (report["view"], report["record_count"]) == ("strict local", 2)
    assert "Candidates: 0" in ok(sandbox.sbuf("--local", "inbox"))

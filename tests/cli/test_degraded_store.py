"""One invalid record file does not take the store offline: `sbuf list` and `status` answer from the
valid records and name the file; a write is refused, naming the file, only when the file may hold an
id or title the write must check. The invalid file is never changed."""

from __future__ import annotations

import json

from stormbuffer.core.ids import new_record_id
from tests.helpers import Sandbox, invoke, record_markdown

BROKEN = '+++\ntitle = "Deploy window\n+++\n'


def broken_store(sandbox: Sandbox) -> tuple[str, str, str]:
    """A project store with one valid record and one invalid file; (valid id, invalid file name, its bytes)."""
    assert sandbox.sbuf("--project", "init").returncode == 0
    added = sandbox.sbuf("--project", "add", "--title", "Valid note", "--body", "Still readable.")
    assert added.returncode == 0, added.stderr
    name = f"records/{new_record_id()}.md"
    (sandbox.project_root / name).write_text(BROKEN, encoding="utf-8")
    return added.stdout.strip(), name, BROKEN


def test_list_and_status_answer_from_the_valid_records_and_name_the_file(sandbox: Sandbox) -> None:
    valid, name, data = broken_store(sandbox)
    listed = sandbox.sbuf("--project", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"{valid}\tactive") and listed.stdout.count("\n") == 1
    assert f"warning: the store is degraded: {name} is invalid" in listed.stderr
    status = sandbox.sbuf("--project", "status", "--json")
    report = json.loads(status.stdout)
    assert report["invalid_files"] == [name] and report["record_count"] == 1
    human = sandbox.sbuf("--project", "status")
    assert f"Invalid file: {name}" in human.stdout.replace("\x1b", "")
    assert (sandbox.project_root / name).read_text(encoding="utf-8") == data


def test_a_write_is_refused_only_when_the_invalid_file_may_collide(sandbox: Sandbox) -> None:
    _valid, name, data = broken_store(sandbox)
    source = {"kind": "conversation", "reference": "t", "actor": "agent"}
    unrelated = {"version": 1, "title": "Release checklist", "kind": "fact", "body": "Fine.", "source": source}
    assert invoke("remember", unrelated, cwd=sandbox.cwd, env=sandbox.env)["ok"]
    colliding = {**unrelated, "title": "Deploy  window"}
    refused = invoke("remember", colliding, cwd=sandbox.cwd, env=sandbox.env)
    assert refused["error"] == {"code": "invalid_record",
                                "message": f"record file {name} is invalid; repair it before this write"}  # fmt: skip
    added = sandbox.sbuf("--project", "add", "--title", "Another note", "--body", "Fine too.")
    assert added.returncode == 0, added.stderr
    assert (sandbox.project_root / name).read_text(encoding="utf-8") == data
    titles = [line.split("\t")[4] for line in sandbox.sbuf("--project", "list", "--all").stdout.splitlines()]
    assert sorted(titles) == ["Another note", "Release checklist", "Valid note"]


def test_a_record_whose_own_file_is_broken_cannot_be_changed(sandbox: Sandbox) -> None:
    valid, _name, _data = broken_store(sandbox)
    path = sandbox.project_root / "records" / f"{valid}.md"
    path.write_text(record_markdown(valid, "project:x")[:40], encoding="utf-8")
    archived = sandbox.sbuf("--project", "archive", valid)
    assert archived.returncode == 1 and f"records/{valid}.md" in archived.stderr

"""`sbuf doctor`, `status` and error wording as people see them: the commands to run name the store's
view, drift is counted rather than listed, and temporaries left by killed writes are found and removed."""

from __future__ import annotations

import json

from tests.helpers import Sandbox, record_markdown

UNINDEXED = 12


def project_store(sandbox: Sandbox) -> str:
    assert sandbox.sbuf("--project", "init").returncode == 0
    return "project:" + json.loads(sandbox.sbuf("--project", "status", "--json").stdout)["project_id"]


def test_doctor_counts_unindexed_records_and_names_the_project_view(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    for number in range(UNINDEXED):  # written by hand, as agents' tools may: not indexed yet
        record_id = f"0190a6b3-7c1e-7a51-9c39-1b2f4c9d8e{number:02d}"
        path = sandbox.project_root / "records" / f"{record_id}.md"
        path.write_text(record_markdown(record_id, scope, title=f"Note {number}", body="Body.", access="agent"))
    report = sandbox.sbuf("--project", "doctor").stdout
    assert report.count("canonical records are not indexed") == 1
    assert f"warning: {UNINDEXED} canonical records are not indexed (records/" in report and ", ...)" in report
    assert "Repair: run `sbuf --project sync`" in report and "run `sbuf sync`" not in report


def test_doctor_reports_and_repairs_temporaries_left_by_a_killed_write(sandbox: Sandbox) -> None:
    project_store(sandbox)
    orphan = sandbox.project_root / "records" / ".0190a6b3-7c1e-7a51-9c39-1b2f4c9d8e11.md.4242.1700000000000000000.tmp"
    orphan.write_text("+++\nhalf a rec")
    report = sandbox.sbuf("--project", "doctor")
    assert "Status: healthy" not in report.stdout
    assert f"a temporary file left by an interrupted write remains at records/{orphan.name}" in report.stdout
    assert "Repair: run `sbuf --project doctor --repair`" in report.stdout
    repaired = sandbox.sbuf("--project", "doctor", "--repair")
    assert f"Repaired: removed stale disposable metadata records/{orphan.name}" in repaired.stdout
    assert "Status: healthy" in repaired.stdout and not orphan.exists()


def test_status_reports_the_index_version_receipts_report(sandbox: Sandbox) -> None:
    project_store(sandbox)
    assert "Index version: 6\n" in sandbox.sbuf("--project", "status").stdout
    receipt = json.loads(
        sandbox.sbuf("--project", "invoke", "context", input='{"version": 1, "query": "anything"}').stdout
    )["result"]["receipt"]
    assert receipt["index_version"] == 6


def test_errors_say_what_happened_in_the_users_words(sandbox: Sandbox) -> None:
    missing = "0190a6b3-7c1e-7a51-9c39-1b2f4c9d8e99"
    assert sandbox.sbuf("--project", "add").stderr == (
        "error: could not add record: store is not initialized; run `sbuf --project init`\n"
    )
    assert "run `sbuf init`" in sandbox.sbuf("list").stderr
    project_store(sandbox)
    assert sandbox.sbuf("--project", "show", missing).stderr == (
        f"error: could not read record: record {missing} was not found\n"
    )
    candidate = sandbox.sbuf("--project", "propose", "--title", "Twice", "--body", "Approved twice.")
    candidate_id = candidate.stdout.split("\t")[0]
    assert sandbox.sbuf("--project", "approve", candidate_id).returncode == 0
    again = sandbox.sbuf("--project", "approve", candidate_id)
    assert again.stderr == f"error: could not update candidate: record {candidate_id} is active, not a candidate\n"
    nul_title = {"version": 1, "title": "a\u0000b", "kind": "fact", "body": "x",
                 "source": {"kind": "conversation", "reference": "r", "actor": "agent"}}  # fmt: skip
    result = json.loads(sandbox.sbuf("--project", "invoke", "remember", input=json.dumps(nul_title)).stdout)["result"]
    assert result["message"] == "invalid record: field `title` is invalid: must not contain control characters"

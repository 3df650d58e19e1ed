"""`sbuf inbox` and `sbuf audit`, run as real processes: filters, formats, findings, and that they never write."""

from __future__ import annotations

import json
import subprocess

import pytest
import tomli_w

from tests.helpers import ESC, Sandbox, record_markdown, tree_digest

OLD_ID = "01890a5d-ac96-774b-bcce-b302099a8057"
NEW_ID = "01890a5d-ac96-774b-bcce-b302099a8058"
MISSING_ID = "01890a5d-ac96-774b-bcce-b302099a8059"


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def failed(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stderr


def project_store(sandbox: Sandbox) -> str:
    """Initialize the project store and return its record scope."""
    ok(sandbox.sbuf("--project", "init"))
    return "project:" + json.loads(ok(sandbox.sbuf("--project", "status", "--json")))["project_id"]


def write_record(sandbox: Sandbox, record_id: str, scope: str, **fields: object) -> None:
    path = sandbox.project_root / "records" / f"{record_id}.md"
    path.write_text(record_markdown(record_id, scope, **fields))  # type: ignore[arg-type]


def test_global_proposal_shows_in_inbox_and_audit_without_changes(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("init"))
    record_id, outcome = ok(sandbox.sbuf("propose")).rstrip("\n").split("\t")
    assert outcome == "requires_approval"
    files = list((sandbox.global_root / "records").rglob("*.md"))
    assert [path.name for path in files] == [f"{record_id}.md"]
    before = tree_digest(sandbox.base, projection=False)

    assert ok(sandbox.sbuf("inbox", "--kind", "fact")).splitlines()[-1] == "Candidates: 1"
    raw = ok(sandbox.sbuf("inbox", "--source", "conversation", "--json"))
    assert raw.endswith("]\n") and ": " not in raw
    entries = json.loads(raw)
    assert len(entries) == 1 and entries[0]["kind"] == "fact"
    assert entries[0] == {
        "id": record_id,
        "title": "Untitled memory",
        "kind": "fact",
        "scope": "global",
        "age_days": 0,
        "sources": ["conversation"],
        "possible_overlap_id": None,
    }
    assert list(entries[0]) == ["id", "title", "kind", "scope", "age_days", "sources", "possible_overlap_id"]

    raw = ok(sandbox.sbuf("audit", "--json"))
    assert raw.startswith('{"findings":[') and raw.endswith("}\n")
    first = json.loads(raw)["findings"][0]
    assert first["kind"] == "unresolved_candidate" and first["record_ids"] == [record_id]
    assert first["follow_up"] == f"sbuf --global approve {record_id} or sbuf --global reject {record_id}"
    assert first["confidence"] == "certain"
    assert list(first) == ["kind", "record_ids", "evidence", "confidence", "rule", "follow_up"]
    assert tree_digest(sandbox.base, projection=False) == before


def test_inbox_lines_and_filters(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    write_record(sandbox, OLD_ID, scope, title="Old\u202e candidate", kind="decision", status="candidate")
    fresh, _ = ok(sandbox.sbuf("--project", "propose", "--title", "Fresh", "--body", "New.")).split("\t")
    add = ok(sandbox.sbuf("--project", "add", "--title", "Active", "--body", "Not a candidate.")).strip()
    age = json.loads(ok(sandbox.sbuf("--project", "inbox", "--json")))[0]["age_days"]
    assert age >= 365 * 5

    lines = ok(sandbox.sbuf("--project", "inbox")).splitlines()
    assert lines == [
        f"{OLD_ID} | decision | project ({scope}) | Old candidate | {age} days",
        f"{fresh} | fact | project ({scope}) | Fresh | 0 days",
        "Candidates: 2",
    ]
    assert add not in "\n".join(lines)

    def ids(*args: str) -> list[str]:
        return [entry["id"] for entry in json.loads(ok(sandbox.sbuf("--project", "inbox", "--json", *args)))]

    assert ids("--min-age-days", "1") == [OLD_ID]
    assert ids("--min-age-days", "0") == [OLD_ID, fresh]
    assert ids("--kind", "fact") == [fresh]
    assert ids("--kind", "checkpoint") == []
    assert ids("--source", "conversation") == [OLD_ID, fresh]
    assert ids("--source", "url") == []
    assert ids("--scope", scope) == [OLD_ID, fresh]
    assert ids("--scope", "global") == []
    assert ids("--possible-overlap") == []


def test_inbox_possible_overlap(sandbox: Sandbox) -> None:
    project_store(sandbox)
    first, _ = ok(sandbox.sbuf("--project", "propose", "--title", "Same title", "--body", "One.")).split("\t")
    second, outcome = ok(sandbox.sbuf("--project", "propose", "--title", "same  TITLE", "--body", "Two.")).split("\t")
    assert outcome.strip() == "possible_overlap"
    ok(sandbox.sbuf("--project", "propose", "--title", "Unrelated", "--body", "Three."))
    entries = json.loads(ok(sandbox.sbuf("--project", "inbox", "--possible-overlap", "--json")))
    assert [(entry["id"], entry["possible_overlap_id"]) for entry in entries] == [(first, second), (second, first)]
    lines = ok(sandbox.sbuf("--project", "inbox", "--possible-overlap")).splitlines()
    assert lines[0].endswith(f" | 0 days | possible overlap: {second}")
    assert lines[-1] == "Candidates: 2"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--kind", "opinion"), "error: invalid memory kind: must be one of fact, decision, procedure, or checkpoint"),
        (("--source", "email"), "error: invalid source kind: must be one of conversation, document, issue, or url"),
        (("--scope", "project"), "error: invalid scope: must be `global` or use the `project:<uuid>` form"),
    ],
)
def test_inbox_rejects_bad_filters(sandbox: Sandbox, args: tuple[str, ...], message: str) -> None:
    project_store(sandbox)
    assert failed(sandbox.sbuf("--project", "inbox", *args)) == f"{message}\n"


@pytest.mark.parametrize(
    "args",
    [
        ("inbox", "--min-age-days", "99999999999999999999"),
        ("audit", "--stale-after-days", "36501"),
        ("inbox", "--min-age-days", "-1"),
    ],
)
def test_day_counts_out_of_range_are_usage_errors(sandbox: Sandbox, args: tuple[str, ...]) -> None:
    project_store(sandbox)
    stderr = failed(sandbox.sbuf("--project", *args), code=2)
    assert args[1] in stderr and "0<=x<=36500" in stderr


def test_audit_findings(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    write_record(sandbox, OLD_ID, scope, title="Old checkpoint", kind="checkpoint")
    write_record(sandbox, NEW_ID, scope, title="Orphan", supersedes=(MISSING_ID,), updated_at="2020-02-02T00:00:00Z")
    candidate = ok(sandbox.sbuf("--project", "propose", "--body", "Waiting.")).split("\t")[0]
    ok(sandbox.sbuf("--project", "add", "--title", "Fresh checkpoint", "--kind", "checkpoint", "--body", "Now."))

    findings = json.loads(ok(sandbox.sbuf("--project", "audit", "--json")))["findings"]
    assert [(found["kind"], found["record_ids"]) for found in findings] == [
        ("broken_link", [NEW_ID]),
        ("stale_checkpoint", [OLD_ID]),
        ("unresolved_candidate", [candidate]),
    ]
    broken, stale, unresolved = findings
    assert broken["follow_up"] == f"sbuf --project edit {NEW_ID}" and MISSING_ID in broken["evidence"]
    assert stale["follow_up"] == f"sbuf --project archive {OLD_ID}"
    assert unresolved["follow_up"] == f"sbuf --project approve {candidate} or sbuf --project reject {candidate}"

    kinds = [
        found["kind"]
        for found in json.loads(ok(sandbox.sbuf("--project", "audit", "--json", "--stale-after-days", "0")))["findings"]
    ]
    assert kinds.count("stale_checkpoint") == 2
    recent = json.loads(ok(sandbox.sbuf("--local", "audit", "--json", "--stale-after-days", "36500")))["findings"]
    assert [found["kind"] for found in recent] == ["broken_link", "unresolved_candidate"]
    assert recent[0]["follow_up"] == f"sbuf --local edit {NEW_ID}"

    lines = ok(sandbox.sbuf("--project", "audit")).splitlines()
    assert lines[0] == f"broken_link | certain | {NEW_ID}"
    assert [line.split(":")[0] for line in lines[1:4]] == ["Evidence", "Rule", "Follow up"]
    assert lines[3] == f"Follow up: sbuf --project edit {NEW_ID}"
    assert lines[-1] == "Findings: 3" and len(lines) == 13


def test_audit_of_a_healthy_store(sandbox: Sandbox) -> None:
    project_store(sandbox)
    assert ok(sandbox.sbuf("--project", "audit")) == "Findings: 0\n"
    assert ok(sandbox.sbuf("--project", "audit", "--json")) == '{"findings":[]}\n'
    assert ok(sandbox.sbuf("--project", "inbox", "--json")) == "[]\n"


def test_review_colour(sandbox: Sandbox) -> None:
    project_store(sandbox)
    assert (
        ok(sandbox.sbuf("--color", "always", "--project", "inbox"))
        == f"{ESC}[1m{ESC}[36mCandidates{ESC}[39m{ESC}[0m: 0\n"
    )
    assert ESC not in ok(sandbox.sbuf("--color", "always", "--project", "inbox", "--json"))
    assert ESC not in ok(sandbox.sbuf("--color", "always", "--project", "audit", "--json"))
    assert ESC not in ok(sandbox.sbuf("--project", "audit"))


def test_inbox_and_audit_leave_an_interrupted_supersession_alone(sandbox: Sandbox) -> None:
    """Readers that may run beside a writer must not roll a journal forward; `list` does."""
    scope = project_store(sandbox)
    records = sandbox.project_root / "records"
    old_before = record_markdown(OLD_ID, scope, title="Old")
    (records / f"{OLD_ID}.md").write_text(old_before)
    journal = {
        "old_path": f"records/{OLD_ID}.md",
        "new_path": f"records/{NEW_ID}.md",
        "old_before": list(old_before.encode()),
        "old_after": record_markdown(OLD_ID, scope, title="Old", status="superseded"),
        "new_after": record_markdown(NEW_ID, scope, title="New", supersedes=(OLD_ID,)),
    }
    (sandbox.project_root / "locks" / "supersede.toml").write_text(tomli_w.dumps(journal))
    before = tree_digest(sandbox.base, projection=False)
    ok(sandbox.sbuf("--project", "inbox"))
    ok(sandbox.sbuf("--project", "audit", "--json"))
    assert tree_digest(sandbox.base, projection=False) == before

    listed = ok(sandbox.sbuf("--project", "list", "--all"))
    assert f"{OLD_ID}\tsuperseded\t" in listed and f"{NEW_ID}\tactive\t" in listed
    assert not (sandbox.project_root / "locks" / "supersede.toml").exists()

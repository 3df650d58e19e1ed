"""`sbuf evaluate`: the checked-in corpus and a user's own questions, run as real processes with the real model."""

from __future__ import annotations

import json
import subprocess

from stormbuffer.evaluation.corpus import THRESHOLDS, threshold_failures
from tests.helpers import Sandbox, run_at_terminal


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ")
    return line


def test_the_corpus_report_is_json_when_piped_and_passes(sandbox: Sandbox) -> None:
    report = json.loads(ok(sandbox.sbuf("evaluate")))
    assert report["passed"] is True and report["failures"] == []
    assert set(report["modes"]) == {"fts-only", "vector-only", "hybrid"}
    hybrid = report["modes"]["hybrid"]
    assert hybrid["recall_at_5"] >= 0.9 and hybrid["mean_reciprocal_rank"] >= 0.6
    assert hybrid["scope_violation_rate"] == 0 and hybrid["inactive_or_superseded_leakage_rate"] == 0
    assert report["queries"] > 30 and report["records"] > 30
    # evaluating built its stores elsewhere: the user's own store is untouched
    assert not (sandbox.global_root / "records").exists()


def test_the_corpus_report_is_a_table_at_a_terminal(sandbox: Sandbox) -> None:
    status, output = run_at_terminal(sandbox, ["evaluate"])
    assert status == 0, output
    assert "recall@5" in output and "hybrid" in output and "Result: passed" in output
    assert not output.lstrip().startswith("{")


def test_a_missed_threshold_is_a_failure_per_metric() -> None:
    passing = {metric: bound for metric, (_op, bound) in THRESHOLDS.items()}
    assert threshold_failures(passing) == []
    failing = passing | {"recall_at_5": 0.5, "scope_violation_rate": 0.1}
    assert threshold_failures(failing) == [
        "hybrid recall_at_5 0.5 is not >= 0.9",
        "hybrid scope_violation_rate 0.1 is not <= 0.0",
    ]


def _add(sandbox: Sandbox, title: str, body: str) -> str:
    return ok(sandbox.sbuf("add", "--title", title, "--body", body, "--access", "agent")).strip()


def test_questions_are_scored_against_the_store(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("init"))
    deploy = _add(sandbox, "Deploys need a green build", "Run make release once CI is green on main.")
    database = _add(sandbox, "Database is PostgreSQL 16", "The ledger API runs on PostgreSQL 16.")
    font = _add(sandbox, "Terminal font", "The terminal uses JetBrains Mono at 13 points.")
    missing = "01900000-0000-7000-8000-000000000000"
    questions = sandbox.base / "questions.jsonl"
    questions.write_text(
        json.dumps({"query": "which database does the ledger use", "expected": database}) + "\n\n"
        + json.dumps({"query": "JetBrains Mono terminal font", "expected": [deploy]}) + "\n"
        + json.dumps({"query": "green build release", "expected": [missing]}) + "\n"
    )  # fmt: skip
    report = json.loads(ok(sandbox.sbuf("evaluate", "--queries", str(questions), "-k", "2")))
    assert (report["questions"], report["k"], report["mode"]) == (3, 2, "hybrid")
    first, second, third = report["results"]
    assert first["rank"] == 1 and first["above"] == [] and first["not_in_store"] == []
    # the font record outranks the expected one: it is listed above it
    assert second["rank"] is not None and second["rank"] > 1
    assert second["above"][0]["id"] == font and second["above"][0]["title"] == "Terminal font"
    assert third["rank"] is None and third["not_in_store"] == [missing] and len(third["above"]) == 2
    assert report["mean_reciprocal_rank"] == round((1 + 1 / second["rank"]) / 3, 4)
    assert report["recall_at_k"] == round((1 + (second["rank"] <= 2)) / 3, 4)

    text = ok(sandbox.sbuf("evaluate", "--queries", str(questions), "--text", "--mode", "lexical"))
    assert "rank 1  which database does the ledger use" in text
    assert f"  1. {font}  Terminal font" in text
    assert f"warning: {missing} is not an active record in this view" in text
    assert "Mode: lexical" in text and "Recall@5:" in text and "MRR:" in text


def test_a_json_array_of_questions_is_read_too(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("init"))
    record = _add(sandbox, "Preferred editor is Helix", "Use hx when a tool asks for an editor.")
    questions = sandbox.base / "questions.json"
    questions.write_text(json.dumps([{"query": "which editor do I use", "expected": [record.upper()]}]))
    report = json.loads(ok(sandbox.sbuf("evaluate", "--queries", str(questions), "--json")))
    assert report["results"][0]["rank"] == 1 and report["recall_at_k"] == 1.0


def test_bad_questions_files_get_one_clear_error(sandbox: Sandbox) -> None:
    questions = sandbox.base / "questions.jsonl"
    questions.write_text('{"query": "a", "expected": "x"}')
    uninitialized = error_line(sandbox.sbuf("--project", "evaluate", "--queries", str(questions)))
    assert (
        uninitialized == "error: could not evaluate the questions: store is not initialized; run `sbuf --project init`"
    )
    ok(sandbox.sbuf("init"))
    cases = {
        "empty.jsonl": ("", "invalid questions file: the file holds no questions"),
        "broken.jsonl": (
            '{"query": "a", "expected": ["x"]}\n{"query": ',
            "invalid questions file: line 2: not valid JSON",
        ),
        "no-query.jsonl": ('{"expected": ["x"]}', 'line 1: "query" must be a non-empty string'),
        "no-expected.json": ('[{"query": "a", "expected": []}]', 'entry 1: "expected" must be a record id'),
        "extra.jsonl": ('{"query": "a", "expected": "x", "answer": "b"}', "line 1: expected an object with"),
        "binary.jsonl": (b"\xff\xfe".decode("latin-1"), "it is not UTF-8 text"),
    }
    for name, (content, message) in cases.items():
        path = sandbox.base / name
        path.write_bytes(content.encode("latin-1"))
        assert message in error_line(sandbox.sbuf("evaluate", "--queries", str(path))), name
    absent = error_line(sandbox.sbuf("evaluate", "--queries", str(sandbox.base / "absent.jsonl")))
    assert absent == "error: could not read the questions file: No such file or directory"
    assert str(sandbox.base) not in absent

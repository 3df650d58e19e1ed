"""The kit fails, naming the right check, against deliberately broken stand-ins of the real doors.

Each stand-in (tests/conformance/stand_ins/) wraps the real `sbuf`, `stormbuffer-mcp` or `sbuf serve`
(a relay on the port the kit gave, in front of the real server) and breaks one rule. The kit runs the
check that must catch it and a neighbouring check that must still pass, so a failure is attributed
to the right check, not to a stand-in that broke everything.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from stormbuffer.conformance import run

STAND_INS = Path(__file__).parent / "stand_ins"

# (stand-in, door, check that must fail, check that must pass)
MUTATIONS = [
    ("wrong_error_code", "invoke", "invoke.example.get/not-found", "invoke.example.get/active-record"),
    ("host_path", "invoke", "invoke.sanitized", "invoke.transport"),
    ("echoed_secret", "invoke", "invoke.sanitized", "invoke.transport"),
    ("missing_receipt_field", "invoke", "invoke.envelopes", "invoke.transport"),
    ("wrong_version", "invoke", "invoke.envelopes", "invoke.transport"),
    ("oversized_answer", "invoke", "invoke.bounds.output", "invoke.transport"),
    ("text_differs", "mcp", "mcp.structured-content", "mcp.tools"),
    ("extra_tool", "mcp", "mcp.tools", "mcp.resources"),
    ("missing_tool", "mcp", "mcp.tools", "mcp.resources"),
    ("writes_without_grant", "mcp", "mcp.read-only", "mcp.initialize"),
    ("candidate_grant_widened", "mcp", "mcp.candidate-writes", "mcp.read-only"),
    ("recall_ignores_scope", "mcp", "mcp.recall-scope", "mcp.initialize"),
    ("http_wrong_status", "http_serve", "http.transport", "http.envelopes"),
    ("http_host_path", "http_serve", "http.sanitized", "http.transport"),
    ("http_foreign_host", "http_serve", "http.host", "http.origin"),
]


@pytest.mark.parametrize(("stand_in", "door", "failing", "passing"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_the_kit_names_the_broken_check(
    stand_in: str, door: str, failing: str, passing: str, caller_env: dict[str, str]
) -> None:
    command = [sys.executable, str(STAND_INS / f"{stand_in}.py")]
    report = run(**{door: command}, patterns=[failing, passing], environ=caller_env)
    outcomes = {outcome.id: outcome for outcome in report.outcomes}
    assert sorted(outcomes) == sorted({failing, passing})
    assert not outcomes[failing].passed, outcomes[failing]
    assert outcomes[passing].passed, outcomes[passing]
    assert outcomes[failing].reason and "\n" not in outcomes[failing].reason
    assert report.passed is False

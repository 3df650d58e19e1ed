"""The version-1 conformance kit: the contract of `sbuf invoke`, `stormbuffer-mcp` and
`POST /v1/invoke/{operation}` as named checks.

`sbuf conformance` runs it from the command line, the pytest plugin (`stormbuffer.conformance.
pytest_plugin`) as tests, and `run` from Python:

    from stormbuffer.conformance import run

    report = run(invoke=["sbuf"], mcp=["stormbuffer-mcp"], http_serve=["sbuf"])
    assert report.passed, report.failed()

Every run works in a throwaway store of its own (`store.ThrowawayStore`), removed at the end.
"""

from __future__ import annotations

from .runner import Outcome, Report, run, select

__all__ = ["Outcome", "Report", "run", "select"]

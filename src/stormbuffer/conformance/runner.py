"""Running the checks against the doors given and reporting each as pass or fail."""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .checks import Check, Failed, Run, catalogue
from .doors import HTTP, HTTP_SERVE, INVOKE, MCP, MCP_HTTP
from .store import ThrowawayStore


@dataclass(frozen=True)
class Outcome:
    id: str
    passed: bool
    reason: str
    seconds: float


@dataclass(frozen=True)
class Report:
    outcomes: list[Outcome]
    seconds: float

    @property
    def passed(self) -> bool:
        return all(outcome.passed for outcome in self.outcomes)

    def failed(self) -> list[str]:
        return [outcome.id for outcome in self.outcomes if not outcome.passed]

    def to_json(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "seconds": round(self.seconds, 3),
            "checks": [{"id": o.id, "passed": o.passed, "reason": o.reason, "seconds": round(o.seconds, 3)}
                       for o in self.outcomes],
        }  # fmt: skip


def select(doors: set[str], patterns: Sequence[str] = ()) -> list[Check]:
    """The checks for the doors given (an equivalence needs both of its doors), filtered by glob
    patterns on their ids."""
    chosen = [check for check in catalogue() if check.doors <= doors]
    if patterns:
        chosen = [check for check in chosen if any(fnmatch.fnmatchcase(check.id, pattern) for pattern in patterns)]
    return sorted(chosen, key=lambda check: check.aggregate)


def run_check(check: Check, run: Run) -> Outcome:
    started = time.perf_counter()
    try:
        check.run(run)
    except Failed as failed:
        return Outcome(check.id, False, str(failed).splitlines()[0] if str(failed) else "failed", _since(started))
    except Exception as exc:  # a crash of the implementation or of its transport is a failure, not the end
        return Outcome(check.id, False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                       _since(started))  # fmt: skip
    return Outcome(check.id, True, check.summary, _since(started))


def _since(started: float) -> float:
    return time.perf_counter() - started


def run(
    invoke: list[str] | None = None,
    mcp: list[str] | None = None,
    patterns: Sequence[str] = (),
    progress: Callable[[Outcome], None] | None = None,
    environ: Mapping[str, str] | None = None,
    http: str | None = None,
    http_serve: list[str] | None = None,
    mcp_http: tuple[str, str] | None = None,
    engine: str = "directory",
) -> Report:
    """Run the checks against `invoke` (e.g. `["sbuf"]`), `mcp` (e.g. `["stormbuffer-mcp"]`) and
    HTTP: a running server at `http` (e.g. `"http://127.0.0.1:7342"`), or `http_serve` (e.g.
    `["sbuf"]`), which the kit starts as `CMD --project serve --port N` in its own places, and MCP
    over Streamable HTTP: `mcp_http` is a running team server's `/mcp` address and a token. The run
    works in a throwaway store that is removed afterwards. `environ` (default `os.environ`) is the
    environment the doors start from (PATH, and the prepared model its cache holds). `engine`: where the
    throwaway stores keep their records, "directory" or "postgresql" (a database per place on the
    server `STORMBUFFER_DATABASE_URL` of `environ` reaches)."""
    if http and http_serve:
        raise ValueError("give either a running HTTP server or a command to serve one, not both")
    given = ((INVOKE, invoke), (MCP, mcp), (HTTP, http or http_serve), (HTTP_SERVE, http_serve), (MCP_HTTP, mcp_http))
    doors = {door for door, command in given if command}
    if not doors:
        raise ValueError("give at least one door to check")
    started = time.perf_counter()
    outcomes = []
    with ThrowawayStore(environ, engine=engine) as store:
        chosen = select(doors, patterns)
        session = Run(store, invoke, mcp, selected=[check.id for check in chosen], http=http, http_serve=http_serve,
                      mcp_http=mcp_http)  # fmt: skip
        try:
            for check in chosen:
                outcome = run_check(check, session)
                outcomes.append(outcome)
                if progress is not None:
                    progress(outcome)
        finally:
            session.close()
    return Report(outcomes, _since(started))

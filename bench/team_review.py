"""What the team's review page costs `sbuf serve --team`: in this process, the check of a page
session against a store holding 100 tokens, and a record's history read from an audit trail of
`--audit-entries` entries (for a record named in a few of them, and for one named in none); through
a real team server on a store of `--candidates` candidates, the p50 of the inbox, the inbox filtered
by proposer, and a record's page with its history, each with a reviewer's token, beside the
redirect of a request without one. `sbuf --version` is timed in the same run. No targets: the
figures say what a page and a session cost.

    .venv/bin/python bench/team_review.py [--requests 100] [--candidates 50] [--audit-entries 100000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from invoke_latency import timed_run  # noqa: E402
from local_auth import p50s_through  # noqa: E402
from machine import machine, result_rows  # noqa: E402
from team_auth import per_call  # noqa: E402

from stormbuffer.adapters.web import pages  # noqa: E402
from stormbuffer.auth import Role  # noqa: E402
from stormbuffer.auth.sessions import TeamSessions  # noqa: E402
from stormbuffer.auth.tokens import TeamTokens  # noqa: E402
from stormbuffer.core.stores import PlatformDirs, StorePaths, View, record_scope, resolve_store  # noqa: E402
from tests.helpers import Sandbox, record_markdown  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "team_review.json"
TOKENS = 100
PROPOSERS = 5
NAMED_IN = 5  # audit entries that name the record whose history is read
ABSENT = "01900000-0000-7000-8000-00000000beef"


def record_id(number: int) -> str:
    return f"01900000-0000-7000-8000-{number + 1:012x}"


def seed(paths: StorePaths, candidates: int) -> None:
    """`candidates` candidates proposed by `PROPOSERS` token names."""
    scope = record_scope(paths)
    for number in range(candidates):
        text = record_markdown(record_id(number), scope, title=f"Candidate {number}", status="candidate",
                               access="agent", body=f"Step {number} runs after the check.\n")  # fmt: skip
        text = text.replace('actor = "human"', f'actor = "member-{number % PROPOSERS}"')
        (paths.root / "records" / f"{record_id(number)}.md").write_text(text, "utf-8")


def fill_audit(paths: StorePaths, entries: int, named: str) -> None:
    """`entries` recall entries of a few records each; `NAMED_IN` of them name `named`."""
    every = max(entries // NAMED_IN, 1)
    lines = []
    for number in range(entries):
        records = [record_id(1000 + (number + offset) % 500) for offset in range(3)]
        if number % every == 0:
            records.append(named)
        lines.append(json.dumps({"at": "2026-12-01T10:00:00Z", "who": f"member-{number % PROPOSERS}", "door": "mcp",
                                 "operation": "recall", "request": "tools/call memory_recall", "status": 200,
                                 "records": records, "receipt": None}, separators=(",", ":")))  # fmt: skip
    folder = paths.root / "team"
    folder.mkdir(mode=0o700, exist_ok=True)
    (folder / "audit.jsonl").write_text("\n".join(lines) + "\n", "utf-8")


def in_process(paths: StorePaths, named: str) -> tuple[dict[str, float], str]:
    """The session check and the history reads, in this process; a reviewer's token."""
    tokens = TeamTokens(paths)
    token = tokens.create("reviewer", Role.REVIEWER, (record_scope(paths),), None)
    for number in range(TOKENS - 1):
        tokens.create(f"member-{number}", Role.AGENT, (record_scope(paths),), None)
    sessions = TeamSessions(tokens)
    opened = sessions.open(token)
    assert opened is not None
    assert len(pages.history(paths, named)) == NAMED_IN
    return {
        "session_check_p50": per_call(lambda: sessions.principal(opened[0])),
        "history_named_in_few": per_call(lambda: pages.history(paths, named), rounds=3, per_round=3),
        "history_named_in_none": per_call(lambda: pages.history(paths, ABSENT), rounds=3, per_round=3),
    }, token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--audit-entries", type=int, default=100_000)
    options = parser.parse_args()
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as base:
        box = Sandbox.create(Path(base))
        assert box.sbuf("--project", "init").returncode == 0
        timed_run(["--version"], box.cwd, box.env)
        version = statistics.median(timed_run(["--version"], box.cwd, box.env)[0] for _ in range(10))
        paths = resolve_store(View.PROJECT, box.cwd, PlatformDirs.from_environ(box.env))
        seed(paths, options.candidates)
        named = record_id(0)
        fill_audit(paths, options.audit_entries, named)
        print(f"in process: {TOKENS} tokens, {options.audit_entries} audit entries ...", file=sys.stderr)
        measured, token = in_process(paths, named)
        reviewer = {"Authorization": f"Bearer {token}"}
        print(f"through a team server: {options.requests} rounds on {options.candidates} candidates ...",
              file=sys.stderr)  # fmt: skip
        served = p50s_through(box, ["--team"], options.requests, {
            "inbox_page": ("/", reviewer, 200),
            "inbox_by_proposer": ("/?proposer=member-1", reviewer, 200),
            "record_page_with_history": (f"/records/{named}", reviewer, 200),
            "page_without_session": ("/", {}, 303),
        })  # fmt: skip
        measured.update(served)
    rows = result_rows(measured, {}, version)
    print(f"sbuf --version: {version * 1000:.1f} ms; whole run {time.monotonic() - began:.0f} s")
    for row in rows:
        seconds = measured[row["name"]]
        print(f"{row['name']:>36}: {seconds * 1e3:9.3f} ms  ({seconds / version:.4f} × --version)")
        row["milliseconds"] = round(seconds * 1e3, 3)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"when": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
                                   "version_s": round(version, 4), "tokens": TOKENS, "requests": options.requests,
                                   "candidates": options.candidates, "audit_entries": options.audit_entries,
                                   "results": rows}, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()

"""What a team token costs `sbuf serve --team`: the in-process check of one request's token against a
store holding 100 tokens (hash, lookup by id, constant-time compare, the file's change check), one
audit entry's append, and through a real team server on a one-record store the p50 of an
authenticated `GET /v1/records` beside a refused one (401, no token), and of `GET` of a missing id
beside that of the record by a token of another scope (both 404: the time should tell nothing), each
audited; `sbuf --version` is timed in the same run. Target: a token check adds at most 1 ms at p50.

    .venv/bin/python bench/team_auth.py [--requests 300]
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

from stormbuffer.adapters.http.access import Credentials  # noqa: E402
from stormbuffer.auth import Role  # noqa: E402
from stormbuffer.auth.audit import AuditTrail  # noqa: E402
from stormbuffer.auth.tokens import TeamTokens  # noqa: E402
from stormbuffer.core.stores import PlatformDirs, View, record_scope, resolve_store  # noqa: E402
from tests.helpers import Sandbox, record_markdown  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "team_auth.json"
TARGETS = {"team_token_check_p50": 0.001}
TOKENS = 100
STORED = "01900000-0000-7000-8000-0000000005e1"
MISSING = "01900000-0000-7000-8000-00000000dead"


def per_call(function: object, rounds: int = 5, per_round: int = 2_000) -> float:
    """Seconds per call of `function()`, the median of `rounds` rounds."""
    assert callable(function)
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(per_round):
            function()
        times.append((time.perf_counter() - began) / per_round)
    return statistics.median(times)


def in_process(box: Sandbox) -> tuple[dict[str, float], str, str]:
    """The token check and the audit append, in this process; the last token made, and one of
    another scope."""
    paths = resolve_store(View.PROJECT, box.cwd, PlatformDirs.from_environ(box.env))
    tokens = TeamTokens(paths)
    elsewhere = tokens.create("elsewhere", Role.ADMIN, ("global",), None)
    token = ""
    for number in range(TOKENS - 1):
        token = tokens.create(f"member-{number}", Role.AGENT, (record_scope(paths),), None)
    credentials = Credentials.for_team(tokens)
    scope = {"type": "http", "path": "/v1/records", "server": ("127.0.0.1", 7342),
             "headers": [(b"host", b"127.0.0.1:7342"), (b"authorization", f"Bearer {token}".encode())]}  # fmt: skip
    assert credentials.principal(scope) is not None
    trail = AuditTrail(paths)
    entry = {"at": "2026-01-01T00:00:00Z", "who": "member-1", "door": "http", "operation": "get",
             "request": "GET /v1/records", "status": 200, "records": [], "receipt": None}  # fmt: skip
    return (
        {
            "team_token_check_p50": per_call(lambda: credentials.principal(scope)),
            "audit_append_p50": per_call(lambda: trail.append(entry)),
        },
        token,
        elsewhere,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    requests = parser.parse_args().requests
    with tempfile.TemporaryDirectory() as base:
        box = Sandbox.create(Path(base))
        assert box.sbuf("--project", "init").returncode == 0
        timed_run(["--version"], box.cwd, box.env)
        version = statistics.median(timed_run(["--version"], box.cwd, box.env)[0] for _ in range(10))
        measured, token, elsewhere = in_process(box)
        scope = record_scope(resolve_store(View.PROJECT, box.cwd, PlatformDirs.from_environ(box.env)))
        (box.project_root / "records" / f"{STORED}.md").write_text(
            record_markdown(STORED, scope, title="Stored", body="A record of this store.\n", access="agent"), "utf-8"
        )
        member, other = {"Authorization": f"Bearer {token}"}, {"Authorization": f"Bearer {elsewhere}"}
        served = p50s_through(box, ["--team"], requests, {
            "authenticated_get_records": ("/v1/records", member, 200),
            "refused_get_records": ("/v1/records", {}, 401),
            "missing_get_record": (f"/v1/records/{MISSING}", member, 404),
            "other_scope_get_record": (f"/v1/records/{STORED}", other, 404),
        })  # fmt: skip
        measured.update({f"team_{name}": seconds for name, seconds in served.items()})
    rows = result_rows(measured, TARGETS, version)
    print(f"sbuf --version: {version * 1000:.1f} ms ({TOKENS} tokens in the store)")
    for row in rows:
        seconds = measured[row["name"]]
        print(f"{row['name']:>40}: {seconds * 1e6:9.1f} µs  ({seconds / version:.4f} × --version)  "
              f"meets target: {row['meets_target']}")  # fmt: skip
        row["microseconds"] = round(seconds * 1e6, 1)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"when": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
                                   "version_s": round(version, 4), "tokens": TOKENS, "requests": requests,
                                   "results": rows}, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()

"""What the team server's limits and its issuer tokens cost, in this process: one rate-limit count
(the moving window, 64 tokens), one audit append (under the shared file lock pruning
needs), one prune of a trail of `--entries` lines (half of them old), and the check of one request's
credential: a team token beside a JWT of a loopback stub OpenID Connect issuer (an RS256 signature,
the key set cached). `sbuf --version` is timed in the same run. Target: a credential check adds at
most 1 ms at p50.

    .venv/bin/python bench/team_limits.py [--entries 100000]
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
from machine import result_rows, save  # noqa: E402
from team_auth import per_call  # noqa: E402

from stormbuffer.adapters.http.access import Credentials  # noqa: E402
from stormbuffer.adapters.http.ratelimit import DEFAULT_RATE, MovingWindow  # noqa: E402
from stormbuffer.auth import Role  # noqa: E402
from stormbuffer.auth.audit import AuditTrail  # noqa: E402
from stormbuffer.auth.oidc import OidcIssuer  # noqa: E402
from stormbuffer.auth.tokens import TeamTokens  # noqa: E402
from stormbuffer.core.stores import PlatformDirs, View, record_scope, resolve_store  # noqa: E402
from tests.helpers import Sandbox  # noqa: E402
from tests.team.test_oidc import AUDIENCE, Issuer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "team_limits.json"
TARGETS = {"team_token_check": 0.001, "oidc_jwt_check": 0.001}
ENTRY = {"who": "member", "door": "http", "operation": "get", "request": "GET /v1/records", "status": 200,
         "records": [], "receipt": None}  # fmt: skip


def request_with(token: str) -> dict[str, object]:
    return {"type": "http", "path": "/v1/records", "server": ("127.0.0.1", 7342),
            "headers": [(b"host", b"127.0.0.1:7342"), (b"authorization", f"Bearer {token}".encode())]}  # fmt: skip


def measure(box: Sandbox, entries: int) -> dict[str, float]:
    paths = resolve_store(View.PROJECT, box.cwd, PlatformDirs.from_environ(box.env))
    tokens = TeamTokens(paths)
    team_token = tokens.create("member", Role.AGENT, (record_scope(paths),), None)
    issuer = Issuer()
    try:
        oidc = OidcIssuer.discover(issuer.url, AUDIENCE, record_scope(paths))
        credentials = Credentials.for_team(tokens, oidc=oidc)
        by_team, by_jwt = request_with(team_token), request_with(issuer.token())
        assert credentials.principal(by_team) is not None and credentials.principal(by_jwt) is not None
        measured = {
            "team_token_check": per_call(lambda: credentials.principal(by_team)),
            "oidc_jwt_check": per_call(lambda: credentials.principal(by_jwt), per_round=200),
        }
    finally:
        issuer.close()
    window, counter = MovingWindow(DEFAULT_RATE), iter(range(10**9))
    measured["rate_limit_count"] = per_call(lambda: window.hit(f"token-{next(counter) % 64}"))
    trail = AuditTrail(paths)
    measured["audit_append"] = per_call(lambda: trail.append({"at": "2026-12-06T00:00:00Z", **ENTRY}), per_round=500)
    old = json.dumps({"at": "2020-01-01T00:00:00Z", **ENTRY}, separators=(",", ":"))
    new = json.dumps({"at": "2026-12-06T00:00:00Z", **ENTRY}, separators=(",", ":"))
    trail.file.write_text("".join(f"{old if n % 2 else new}\n" for n in range(entries)), encoding="utf-8")
    began = time.perf_counter()
    dropped = trail.prune(datetime(2021, 1, 1, tzinfo=UTC))
    measured[f"audit_prune_{entries}_lines"] = time.perf_counter() - began
    assert dropped == entries // 2, dropped
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sbuf-bench-") as folder:
        box = Sandbox.create(Path(folder))
        assert box.sbuf("--project", "init").returncode == 0
        timed_run(["--version"], box.cwd, box.env)
        version = statistics.median(timed_run(["--version"], box.cwd, box.env)[0] for _ in range(10))
        measured = measure(box, options.entries)
    rows = result_rows(measured, TARGETS, version)
    print(f"sbuf --version: {version * 1000:.1f} ms")
    for row in rows:
        seconds = measured[row["name"]]
        verdict = "" if row["meets_target"] is None else ("meets" if row["meets_target"] else "MISSES") + " its target"
        print(f"{row['name']:>28}: {seconds * 1e6:10.1f} µs  ({seconds / version:.4f} × --version)  {verdict}")
    save(RESULTS, {"sbuf_version_s": round(version, 4), "rows": rows,
                   "microseconds": {name: round(value * 1e6, 1) for name, value in measured.items()}})  # fmt: skip


if __name__ == "__main__":
    main()

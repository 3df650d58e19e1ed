"""What the team server's limits and its issuer tokens cost, in this process: one rate-limit count
(the moving window, 64 tokens), one audit append (under the shared file lock pruning
needs), one prune of a trail of `--entries` lines (half of them old), and the check of one request's
credential: a team token beside a JWT of a loopback stub OpenID Connect issuer (an RS256 signature,
the key set cached). `sbuf --version` is timed in the same run. Target: a credential check adds at
most 1 ms at p50.

Then the same token check and audit append for a store on PostgreSQL (the tests' real server, on
its Unix socket), where both are a query of the store's database, paired with the directory
store's: the two alternate round by round, so a machine busy with other work slows both alike, and
the ratios are the figures to compare; beside them a bare round trip (`SELECT 1` from psycopg),
the floor of any query; and a prune of `--entries` rows, half of them old.

    .venv/bin/python bench/team_limits.py [--entries 100000] [--no-postgresql]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
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
from stormbuffer.auth.audit import AuditFile  # noqa: E402
from stormbuffer.auth.oidc import OidcIssuer  # noqa: E402
from stormbuffer.auth.storage import audit_trail  # noqa: E402
from stormbuffer.auth.tokens import TeamTokens  # noqa: E402
from stormbuffer.core.stores import PlatformDirs, View, record_scope, resolve_store  # noqa: E402
from tests.helpers import Sandbox  # noqa: E402
from tests.postgres import PostgresServer  # noqa: E402
from tests.team.test_oidc import AUDIENCE, Issuer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "team_limits.json"
VARIABLE = "STORMBUFFER_DATABASE_URL"
PAIRED_ROUNDS = 9
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
    trail = AuditFile(paths)
    measured["audit_append"] = per_call(lambda: trail.append({"at": "2026-12-06T00:00:00Z", **ENTRY}), per_round=500)
    old = json.dumps({"at": "2020-01-01T00:00:00Z", **ENTRY}, separators=(",", ":"))
    new = json.dumps({"at": "2026-12-06T00:00:00Z", **ENTRY}, separators=(",", ":"))
    trail.file.write_text("".join(f"{old if n % 2 else new}\n" for n in range(entries)), encoding="utf-8")
    began = time.perf_counter()
    dropped = trail.prune(datetime(2021, 1, 1, tzinfo=UTC))
    measured[f"audit_prune_{entries}_lines"] = time.perf_counter() - began
    assert dropped == entries // 2, dropped
    return measured


def paired(calls: dict[str, Callable[[], object]], per_round: int) -> dict[str, float]:
    """Seconds per call of each function, the median of `PAIRED_ROUNDS` rounds that take turns."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(PAIRED_ROUNDS):
        for name, function in calls.items():
            began = time.perf_counter()
            for _ in range(per_round):
                function()
            times[name].append((time.perf_counter() - began) / per_round)
    return {name: statistics.median(values) for name, values in times.items()}


def measure_postgresql(directory: Sandbox, base: Path, entries: int) -> dict[str, float]:
    """The token check and the audit append on a PostgreSQL store beside the directory store's, paired;
    a prune of `entries` rows."""
    server = PostgresServer.start()
    try:
        url = server.create_database()
        os.environ[VARIABLE] = url  # the store's `store.toml` names the variable; this process reads it
        box = Sandbox.create(base)
        box.env[VARIABLE] = url
        made = box.sbuf("--project", "init", "--engine", "postgresql")
        assert made.returncode == 0, made.stderr
        calls: dict[str, Callable[[], object]] = {}
        for engine, sandbox in (("directory", directory), ("postgresql", box)):
            paths = resolve_store(View.PROJECT, sandbox.cwd, PlatformDirs.from_environ(sandbox.env))
            tokens = TeamTokens(paths)
            scope = record_scope(paths)
            token = [tokens.create(f"member-{n}", Role.AGENT, (scope,), None) for n in range(20)][-1]
            credentials, request = Credentials.for_team(tokens), request_with(token)
            assert credentials.principal(request) is not None
            trail = audit_trail(paths)  # the last one, PostgreSQL's, is pruned below
            calls[f"{engine}_token_check"] = lambda c=credentials, r=request: c.principal(r)  # type: ignore[misc]
            calls[f"{engine}_audit_append"] = lambda t=trail: t.append({"at": "2026-12-06T00:00:00Z", **ENTRY})
        import psycopg

        bare = psycopg.connect(url, autocommit=True)  # the floor: one round trip, nothing else
        calls["postgresql_bare_round_trip"] = lambda: bare.execute("SELECT 1").fetchone()
        checks = ("token_check", "round_trip")
        measured = paired({name: call for name, call in calls.items() if name.endswith(checks)}, 300)
        bare.close()
        measured |= paired({name: call for name, call in calls.items() if name.endswith("audit_append")}, 100)

        with psycopg.connect(url) as conn:
            conn.execute("INSERT INTO stormbuffer.team_audit (store, at, who, records, entry) SELECT %s, "
                         "CASE WHEN n %% 2 = 1 THEN timestamptz '2020-01-01' ELSE now() END, 'member', '{}', '{}' "
                         "FROM generate_series(1, %s) AS n", (record_scope(paths), entries))  # fmt: skip
        began = time.perf_counter()
        dropped = trail.prune(datetime(2021, 1, 1, tzinfo=UTC))
        measured[f"postgresql_audit_prune_{entries}_rows"] = time.perf_counter() - began
        assert dropped == (entries + 1) // 2, dropped
        return measured
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--no-postgresql", dest="postgresql", action="store_false",
                        help="leave out the PostgreSQL store")  # fmt: skip
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sbuf-bench-") as folder:
        box = Sandbox.create(Path(folder))
        assert box.sbuf("--project", "init").returncode == 0
        timed_run(["--version"], box.cwd, box.env)
        version = statistics.median(timed_run(["--version"], box.cwd, box.env)[0] for _ in range(10))
        measured = measure(box, options.entries)
        if options.postgresql:
            measured |= measure_postgresql(box, Path(folder) / "postgresql", options.entries)
    rows = result_rows(measured, TARGETS, version)
    print(f"sbuf --version: {version * 1000:.1f} ms")
    for row in rows:
        seconds = measured[row["name"]]
        verdict = "" if row["meets_target"] is None else ("meets" if row["meets_target"] else "MISSES") + " its target"
        print(f"{row['name']:>28}: {seconds * 1e6:10.1f} µs  ({seconds / version:.4f} × --version)  {verdict}")
    for what in ("token_check", "audit_append"):
        if f"postgresql_{what}" in measured:
            ratio = measured[f"postgresql_{what}"] / measured[f"directory_{what}"]
            print(f"{what} on PostgreSQL: {ratio:.1f} × the directory store's (paired rounds)")
    save(RESULTS, {"sbuf_version_s": round(version, 4), "rows": rows,
                   "microseconds": {name: round(value * 1e6, 1) for name, value in measured.items()}})  # fmt: skip


if __name__ == "__main__":
    main()

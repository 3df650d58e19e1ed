"""`sbuf conformance` passes against this package's own `sbuf` and `stormbuffer-mcp` (and its HTTP door, with
the throwaway stores in PostgreSQL), reports each check on one line, and leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg

from stormbuffer.conformance import select
from stormbuffer.core.stores import DATABASE_URL_ENV
from tests.postgres import PostgresServer

from .conftest import BIN

STAND_INS = Path(__file__).parent / "stand_ins"
EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "schema" / "v1" / "examples").glob("*/*.json"))


def conformance(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "sbuf"), "conformance", *args], env=env, capture_output=True, text=True,
                          timeout=1200, check=False)  # fmt: skip


def test_the_kit_passes_against_our_doors(caller_env: dict[str, str]) -> None:
    done = conformance("--invoke", str(BIN / "sbuf"), "--mcp", str(BIN / "stormbuffer-mcp"), "--json", env=caller_env)
    report = json.loads(done.stdout)
    failed = [f"{check['id']}: {check['reason']}" for check in report["checks"] if not check["passed"]]
    assert failed == [] and report["passed"] is True and done.returncode == 0, failed
    assert [check["id"] for check in report["checks"]] == [check.id for check in select({"invoke", "mcp"})]
    ids = {check["id"] for check in report["checks"]}
    assert {"invoke.sanitized", "mcp.structured-content", "equivalence.get/not-found", "mcp.tools"} <= ids
    assert len([i for i in ids if i.startswith("invoke.example.")]) == len(EXAMPLES)
    assert list(Path(caller_env["TMPDIR"]).iterdir()) == []  # the throwaway store is gone


def test_the_kit_passes_on_postgresql_stores(caller_env: dict[str, str], postgres_server: PostgresServer) -> None:
    """Every check of the three doors and their equivalences, each place's stores in a database of its own."""
    sbuf = str(BIN / "sbuf")
    env = {**caller_env, DATABASE_URL_ENV: postgres_server.socket_url()}
    done = conformance("--engine", "postgresql", "--invoke", sbuf, "--mcp", str(BIN / "stormbuffer-mcp"),
                       "--http-serve", sbuf, "--json", env=env)  # fmt: skip
    report = json.loads(done.stdout)
    failed = [f"{check['id']}: {check['reason']}" for check in report["checks"] if not check["passed"]]
    assert failed == [] and report["passed"] is True and done.returncode == 0, failed
    ids = [check["id"] for check in report["checks"]]
    assert ids == [check.id for check in select({"invoke", "mcp", "http", "http-serve"})]
    assert {"equivalence.get/not-found", "equivalence.http.get/not-found", "http.behaviour.secret-guard"} <= set(ids)
    with psycopg.connect(postgres_server.socket_url()) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'sbuf_conformance_%'").fetchall()
    assert left == [] and list(Path(caller_env["TMPDIR"]).iterdir()) == []  # the databases and places are gone


def test_the_kit_needs_a_database_url_for_postgresql(caller_env: dict[str, str]) -> None:
    done = conformance("--engine", "postgresql", "--invoke", "sbuf", env=caller_env)
    assert done.returncode == 2 and f"needs {DATABASE_URL_ENV}" in done.stderr and "Traceback" not in done.stderr


def test_the_text_report_has_one_line_per_check_and_the_exit_status_says_all_passed(caller_env: dict[str, str]) -> None:
    good = conformance("--invoke", "sbuf", "-k", "*.invalid-json", "-k", "*.path-denied", env=caller_env)
    lines = good.stdout.splitlines()
    assert good.returncode == 0 and len(lines) == 3, good.stdout + good.stderr
    assert all(line.startswith("pass invoke.behaviour.") and ": " in line for line in lines[:-1])
    assert lines[-1].startswith("2 passed, 0 failed")
    broken = f"{sys.executable} {STAND_INS / 'wrong_error_code.py'}"
    bad = conformance("--invoke", broken, "-k", "invoke.example.get/[an]*-*", env=caller_env)
    assert bad.returncode == 1 and "pass invoke.example.get/active-record" in bad.stdout
    assert 'FAIL invoke.example.get/not-found: $.error.code: expected "not_found", got "invalid_state"' in bad.stdout
    none = conformance("--invoke", "sbuf", "-k", "no-such-check", env=caller_env)
    assert none.returncode == 1 and "no check matches" in none.stderr
    usage = conformance(env=caller_env)
    assert usage.returncode == 2 and "--invoke" in usage.stderr

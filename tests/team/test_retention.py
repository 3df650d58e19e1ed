"""Audit retention: `AuditFile.prune` drops old entries while other processes keep appending, and
loses none of theirs; `sbuf serve --team --audit-retention` prunes a real store's trail."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stormbuffer.auth.audit import AuditFile, Filter
from stormbuffer.core.stores import StorePaths
from tests.http.conftest import TIMEOUT, sandbox_with_stores, start

from .test_server import Team

APPENDERS = 3
EACH = 800  # entries per appender, every other one dated 2020
CUTOFF = datetime(2021, 1, 1, tzinfo=UTC)
APPEND = textwrap.dedent("""
    import sys
    from pathlib import Path
    from stormbuffer.auth.audit import AuditFile
    from stormbuffer.core.stores import StorePaths

    root, name, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    trail = AuditFile(StorePaths("project", root, root / "cache"))
    for n in range(count):
        at = "2020-06-01T00:00:00Z" if n % 2 else "2026-12-06T00:00:00Z"
        trail.append({"at": at, "who": name, "door": "http", "operation": "get", "request": f"GET /{n}",
                      "status": 200, "records": [], "receipt": None})
""")


def test_pruning_while_others_append_loses_no_new_entry(tmp_path: Path) -> None:
    trail = AuditFile(StorePaths("project", tmp_path, tmp_path / "cache"))
    for n in range(200):
        trail.append({"at": "2019-01-01T00:00:00Z", "who": "old", "request": f"GET /{n}", "records": []})
    appenders = [subprocess.Popen([sys.executable, "-c", APPEND, str(tmp_path), f"writer{index}", str(EACH)])
                 for index in range(APPENDERS)]  # fmt: skip
    dropped, prunes, deadline = 0, 0, time.monotonic() + TIMEOUT
    while any(process.poll() is None for process in appenders) and time.monotonic() < deadline:
        dropped += trail.prune(CUTOFF)
        prunes += 1
    assert [process.wait(TIMEOUT) for process in appenders] == [0] * APPENDERS
    dropped += trail.prune(CUTOFF)
    entries = list(trail.entries(Filter()))
    assert dropped == 200 + APPENDERS * EACH // 2 and prunes > 1
    kept = sorted((entry["who"], entry["request"]) for entry in entries)
    wanted = sorted((f"writer{index}", f"GET /{n}") for index in range(APPENDERS) for n in range(0, EACH, 2))
    assert kept == wanted  # every new entry once, every old one gone
    assert oct(trail.file.stat().st_mode & 0o777) == "0o600"
    assert sorted(path.name for path in trail.folder.iterdir()) == ["audit.jsonl"]  # no temporary file left


def test_a_damaged_line_is_kept_and_an_empty_trail_is_no_error(tmp_path: Path) -> None:
    trail = AuditFile(StorePaths("project", tmp_path, tmp_path / "cache"))
    assert trail.prune(CUTOFF) == 0
    trail.append({"at": "2019-01-01T00:00:00Z", "who": "old"})
    with trail.file.open("a", encoding="utf-8") as handle:
        handle.write("{not json\n")
    assert trail.prune(CUTOFF) == 1
    assert trail.file.read_text(encoding="utf-8") == "{not json\n"


def test_a_team_server_prunes_its_trail_at_start(tmp_path: Path) -> None:
    box = sandbox_with_stores(tmp_path / "sandbox", None)
    audit = box.project_root / "team" / "audit.jsonl"
    audit.parent.mkdir(mode=0o700)
    old = {"at": "2020-01-01T00:00:00Z", "who": "gone", "door": "http", "operation": "get",
           "request": "GET /v1/records", "status": 200, "records": [], "receipt": None}  # fmt: skip
    audit.write_text(json.dumps(old) + "\n", encoding="utf-8")
    audit.chmod(0o600)
    server = start(box, "--team", "--audit-retention", "30d")
    try:
        crew = Team(server)
        crew.make("rita", "reader")
        assert crew.call("rita", "GET", "/v1/records").status_code == 200
        deadline = time.monotonic() + TIMEOUT
        while '"who": "gone"' in audit.read_text(encoding="utf-8") and time.monotonic() < deadline:
            time.sleep(0.1)
        listed = box.sbuf("--project", "team", "audit", "--json")
    finally:
        assert server.stop() == 0
    who = [json.loads(line)["who"] for line in listed.stdout.splitlines()]
    assert "gone" not in who and "rita" in who
    assert "audit trail pruned entries=1" in "".join(server.log)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--team", "--audit-retention", "90 days"), "must be a number of days, hours or minutes"),
        (("--team", "--audit-retention", "0d"), "must be a number of days, hours or minutes"),
        (("--audit-retention", "90d"), "for a team server: add --team"),
    ],
)
def test_a_bad_retention_is_refused_at_start(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    box = sandbox_with_stores(tmp_path / "sandbox", None)
    done = box.sbuf("--project", "serve", "--port", "0", *args)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr

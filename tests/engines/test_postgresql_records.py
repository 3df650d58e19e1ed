"""A store whose records live in PostgreSQL, driven through real `sbuf` processes against the test
session's real server: opting in, sanitized errors, the record lifecycle, export and import
byte for byte, and writers that run at once or are killed mid-write."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from stormbuffer.core.codec import parse_markdown
from stormbuffer.core.errors import Conflict
from stormbuffer.core.repository import Repository
from stormbuffer.core.stores import PlatformDirs, View, resolve_store
from tests.helpers import Sandbox, editor, invoke, link_tree
from tests.postgres import PASSWORD, PostgresServer

VARIABLE = "STORMBUFFER_DATABASE_URL"
REFERENCE_STORE = Path(__file__).resolve().parents[1] / "fixtures" / "reference-store" / ".sbuf"
SOME_ID = "01900000-0000-7000-8000-000000000001"
ENGINE_LINES = f'engine = "postgresql"\ndatabase_url_env = "{VARIABLE}"\n'


@pytest.fixture
def sandbox(tmp_path: Path, acquired_models: Path, postgres_url: str) -> Sandbox:
    """A sandbox whose environment names a fresh database; no daemon (each command runs in its process)."""
    box = Sandbox.create(tmp_path)
    link_tree(acquired_models, tmp_path / "cache" / "stormbuffer" / "models")
    box.env.update({VARIABLE: postgres_url, "STORMBUFFER_NO_DAEMON": "1"})
    return box


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def failed(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    return result.stderr.strip()


def rows(url: str) -> dict[str, bytes]:
    """Record id → the canonical bytes the database holds."""
    with psycopg.connect(url) as conn:
        found = conn.execute("SELECT id, markdown FROM stormbuffer.records ORDER BY id").fetchall()
    return {record_id: bytes(data) for record_id, data in found}


def projected(url: str) -> dict[str, int]:
    """Record id → how many chunks the projection holds for it."""
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT r.id, count(c.id) FROM stormbuffer.projection_records r "
            "LEFT JOIN stormbuffer.projection_chunks c ON c.store = r.store AND c.record_id = r.id GROUP BY r.id"
        ).fetchall()
    return dict(found)


def repository(box: Sandbox) -> Repository:
    return Repository(resolve_store(View.PROJECT, box.cwd, PlatformDirs(box.base / "data", box.base / "cache")))


# ---- opting in ----------------------------------------------------------------------------------


def test_init_names_the_engine_and_the_variable_never_the_url(
    sandbox: Sandbox, postgres_server: PostgresServer
) -> None:
    database = sandbox.env[VARIABLE].split("@/", 1)[1].split("?", 1)[0]
    env = sandbox.env_with(**{VARIABLE: postgres_server.tcp_url(database)})
    result = sandbox.sbuf("--project", "init", "--engine", "postgresql", env=env)
    assert result.returncode == 0, result.stderr
    config = (sandbox.project_root / "store.toml").read_text()
    assert config.endswith(ENGINE_LINES) and config.count("\n") == 7
    assert PASSWORD not in config + result.stdout + result.stderr
    again = sandbox.sbuf("--project", "init", env=env)
    assert "Already initialized" in ok(again)
    refused = failed(sandbox.sbuf("--project", "init", "--engine", "directory", env=env))
    assert refused == "error: could not initialize store: the store already keeps its records in the postgresql engine"

    ok(sandbox.sbuf("init", env=env))  # a directory store's store.toml stays the reference's
    assert (sandbox.global_root / "store.toml").read_text() == (
        'format_version = 1\nscope = "global"\nvisibility = "private"\n'
    )


def test_a_database_that_cannot_be_used_is_one_clear_error(sandbox: Sandbox, postgres_server: PostgresServer) -> None:
    ok(sandbox.sbuf("--project", "init", "--engine", "postgresql"))
    database = sandbox.env[VARIABLE].split("@/", 1)[1].split("?", 1)[0]
    closed = f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/{database}"
    cases = {
        "": f"{VARIABLE} is not set: this store keeps its records in the PostgreSQL database it names",
        "mysql://user:pw@127.0.0.1/x": f"{VARIABLE} is not a postgresql:// URL",
        postgres_server.tcp_url(
            database, password="wrong-" + PASSWORD
        ): "authentication failed (check the user and password)",
        postgres_server.tcp_url("no_such_database"): "the database does not exist",
        closed: "the server cannot be reached",
    }
    for url, reason in cases.items():
        line = failed(sandbox.sbuf("--project", "list", env=sandbox.env_with(**{VARIABLE: url})))
        assert line.startswith("error: could not list records: ") and reason in line, line
        assert VARIABLE in line
        assert PASSWORD not in line and str(postgres_server.base) not in line and "127.0.0.1" not in line
    envelope = invoke("get", {"version": 1, "id": SOME_ID}, cwd=sandbox.cwd, env=sandbox.env_with(**{VARIABLE: closed}))
    assert envelope["error"] == {
        "code": "internal_error",
        "message": "the store's PostgreSQL database cannot be used; `sbuf list` on this store says why",
    }
    fresh = sandbox.base / "fresh"
    fresh.mkdir()
    line = failed(sandbox.sbuf("--project", "init", "--engine", "postgresql", cwd=fresh,
                               env=sandbox.env_with(**{VARIABLE: closed})))  # fmt: skip
    assert line.endswith("the server cannot be reached") and not (fresh / ".sbuf" / "store.toml").exists()


# ---- the lifecycle --------------------------------------------------------------------------------


def test_the_record_lifecycle_keeps_canonical_bytes_in_the_database(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init", "--engine", "postgresql"))
    url = sandbox.env[VARIABLE]
    scope = repository(sandbox).scope
    first = ok(sandbox.sbuf("--project", "add", "--title", "A durable fact", "--body", "Durable body text.")).strip()
    assert ok(sandbox.sbuf("--project", "list")) == f"{first}\tactive\tfact\t{scope}\tA durable fact\n"
    assert ok(sandbox.sbuf("--project", "show", first)) == rows(url)[first].decode() + "\n"
    assert projected(url) == {first: 1}  # projected in the write's transaction

    rewrite = editor(sandbox, "rebody", "path.write_text(path.read_text().replace('Durable body', 'Edited body'))")
    ok(sandbox.sbuf("--project", "edit", first, env=sandbox.env_with(EDITOR=rewrite)))
    assert parse_markdown(rows(url)[first]).body == "Edited body text."
    assert ok(sandbox.sbuf("--project", "archive", first)) == f"{first}\tarchived\n"
    assert ok(sandbox.sbuf("--project", "restore", first)) == f"{first}\tactive\n"

    second = ok(sandbox.sbuf("--project", "supersede", first, "--kind", "decision")).strip()
    assert ok(sandbox.sbuf("--project", "list")) == f"{second}\tactive\tdecision\t{scope}\tA durable fact\n"
    stored = {record_id: parse_markdown(data) for record_id, data in rows(url).items()}
    assert stored[first].status == "superseded" and stored[second].supersedes == (first,)

    candidate = ok(sandbox.sbuf("--project", "propose", "--title", "Proposed", "--body", "Proposed body."))
    candidate_id = candidate.split("\t")[0]
    again = ok(sandbox.sbuf("--project", "propose", "--title", "PROPOSED", "--body", "proposed   body."))
    assert again.endswith("\tduplicate_of\n")
    overlap = ok(sandbox.sbuf("--project", "propose", "--title", "Proposed", "--body", "Another body."))
    assert overlap.endswith("\tpossible_overlap\n")
    assert f"{candidate_id} | fact |" in ok(sandbox.sbuf("--project", "inbox"))
    assert ok(sandbox.sbuf("--project", "approve", candidate_id)) == f"{candidate_id}\taccepted\tactive\n"
    assert ok(sandbox.sbuf("--project", "reject", overlap.split("\t")[0])).endswith("\trejected\tarchived\n")

    ok(sandbox.sbuf("--project", "forget", second, "--destroy", "--yes"))
    assert second not in rows(url)
    assert set(projected(url)) == set(rows(url))
    line = failed(sandbox.sbuf("--project", "show", second))
    assert line == f"error: could not read record: record {second} was not found"
    assert not any((sandbox.project_root / "records").glob("*.md"))  # nothing went to files


def test_an_edit_over_a_row_changed_meanwhile_is_a_conflict(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    ok(sandbox.sbuf("--project", "init", "--engine", "postgresql"))
    monkeypatch.setenv(VARIABLE, sandbox.env[VARIABLE])
    record_id = ok(sandbox.sbuf("--project", "add", "--title", "Edited twice", "--body", "Start.")).strip()
    store = repository(sandbox)
    started = store.find(record_id)
    store.replace_if_unchanged(started, started.record.replace(body="First edit."))
    with pytest.raises(Conflict, match="record changed while it was being edited"):
        store.replace_if_unchanged(started, started.record.replace(body="Second edit."))
    assert parse_markdown(rows(sandbox.env[VARIABLE])[record_id]).body == "First edit."


# ---- moving stores ---------------------------------------------------------------------------------


def _project_with(box: Sandbox, name: str, config: str) -> Path:
    """A project directory whose `.sbuf/store.toml` is `config` and which holds no record."""
    project = box.base / name
    (project / ".sbuf" / "records").mkdir(parents=True)
    (project / ".sbuf" / "store.toml").write_text(config)
    return project


def test_export_and_import_round_trip_the_reference_store_byte_for_byte(sandbox: Sandbox) -> None:
    directory = sandbox.base / "directory"
    shutil.copytree(REFERENCE_STORE, directory / ".sbuf")
    first = directory / "first.json"
    ok(sandbox.sbuf("--project", "export", str(first), cwd=directory))

    config = (REFERENCE_STORE / "store.toml").read_text()
    database = _project_with(sandbox, "database", config + ENGINE_LINES)
    ok(sandbox.sbuf("--project", "init", cwd=database))  # creates the tables
    assert "Imported: 12\n" in ok(sandbox.sbuf("--project", "import", str(first), cwd=database))
    assert len(rows(sandbox.env[VARIABLE])) == 12
    second = sandbox.base / "second.json"
    ok(sandbox.sbuf("--project", "export", str(second), cwd=database))
    assert second.read_bytes() == first.read_bytes()

    back = _project_with(sandbox, "back", config)
    ok(sandbox.sbuf("--project", "import", str(second), cwd=back))
    expected = {path.name: path.read_bytes() for path in (REFERENCE_STORE / "records").glob("*.md")}
    assert {path.name: path.read_bytes() for path in (back / ".sbuf" / "records").glob("*.md")} == expected
    assert set(rows(sandbox.env[VARIABLE]).values()) == set(expected.values())


# ---- many writers ------------------------------------------------------------------------------------

WRITER = """
import sys, time
from pathlib import Path
from stormbuffer.core.errors import Conflict
from stormbuffer.core.ids import new_record_id
from stormbuffer.core.records import Record, Source
from stormbuffer.core.repository import Repository
from stormbuffer.core.stores import PlatformDirs, View, resolve_store
from stormbuffer.core.timestamps import Timestamp

cwd, base, name, count = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
store = Repository(resolve_store(View.PROJECT, cwd, PlatformDirs(base / "data", base / "cache")), lock_wait=30)
for number in range(count):
    now = Timestamp.now()
    record = Record(id=new_record_id(), title=f"{name} {number}", kind="fact", scope=store.scope, status="active",
                    access="agent", created_at=now, updated_at=now,
                    sources=(Source("document", f"notes/{name}", "human"),), body=f"Written by {name}.")
    outcome = store.propose(record, "human").outcome
    print(record.id, outcome, flush=True)
    old = store.find(record.id)
    replacement = record.replace(id=new_record_id(), supersedes=(record.id,), body=f"Replaced by {name}.")
    store.supersede(old.record.id, replacement)
    print(replacement.id, "superseded", flush=True)
"""


def _writers(box: Sandbox, count: int, writes: int, name: str = "writer") -> list[subprocess.Popen[str]]:
    script = box.base / "writer.py"
    script.write_text(WRITER)
    return [
        subprocess.Popen(
            [sys.executable, str(script), str(box.cwd), str(box.base), f"{name}-{n}", str(writes)],
            env=box.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for n in range(count)
    ]


def _consistent(url: str) -> dict[str, str]:
    """Every row parses and is projected; every replacement's old record is superseded, every superseded
    one replaced."""
    stored = {record_id: parse_markdown(data) for record_id, data in rows(url).items()}
    assert set(projected(url)) == set(stored)
    replaced = {old for record in stored.values() for old in record.supersedes}
    for record in stored.values():
        assert all(stored[old].status == "superseded" for old in record.supersedes)
        assert (record.status == "superseded") == (record.id in replaced)
    return {record_id: record.status for record_id, record in stored.items()}


def test_processes_writing_at_once_lose_nothing(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init", "--engine", "postgresql"))
    processes = _writers(sandbox, count=4, writes=15)
    reported: list[str] = []
    for process in processes:
        out, err = process.communicate(timeout=240)
        assert process.returncode == 0, err
        reported += out.split()
    outcomes = dict(zip(reported[::2], reported[1::2], strict=True))
    assert len(outcomes) == 4 * 15 * 2  # no id written twice
    assert set(outcomes.values()) == {"accepted", "superseded"}
    statuses = _consistent(sandbox.env[VARIABLE])
    assert set(statuses) == set(outcomes)
    assert sorted(statuses.values()).count("active") == 4 * 15


def test_writers_killed_mid_write_leave_no_partial_record(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init", "--engine", "postgresql"))
    kills = 0
    deadline = time.monotonic() + 120
    while kills < 12 and time.monotonic() < deadline:
        (process,) = _writers(sandbox, count=1, writes=1000, name=f"killed-{kills}")
        assert process.stdout is not None
        for _ in range(1 + kills % 5):  # a few writes in, then killed wherever it is
            assert process.stdout.readline()
        time.sleep(0.002 * (kills % 4))
        assert process.poll() is None
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        kills += 1
        _consistent(sandbox.env[VARIABLE])
    assert kills == 12
    listed = ok(sandbox.sbuf("--project", "list", "--all")).splitlines()
    assert len(listed) == len(rows(sandbox.env[VARIABLE])) > 12


# ---- the agent doors -------------------------------------------------------------------------------


def test_invoke_and_the_daemon_answer_from_the_database(sandbox: Sandbox) -> None:
    from stormbuffer.daemon import relay

    env = sandbox.env_with(STORMBUFFER_NO_DAEMON=None)
    ok(sandbox.sbuf("--project", "init", "--engine", "postgresql", env=env))
    source = {"kind": "conversation", "reference": "session 7", "actor": "agent"}
    remember = {"version": 1, "title": "Deploys wait for a green build", "kind": "procedure",
                "body": "Tag a release only after the whole suite passed.", "source": source}  # fmt: skip
    proposed = invoke("remember", remember, cwd=sandbox.cwd, env=env)["result"]
    assert proposed["outcome"] == "requires_approval"
    record_id = proposed["record_id"]
    ok(sandbox.sbuf("--project", "approve", record_id, env=env))
    got = invoke("get", {"version": 1, "id": record_id}, cwd=sandbox.cwd, env=env)["result"]
    assert got["status"] == "active" and parse_markdown(rows(sandbox.env[VARIABLE])[record_id]).status == "active"

    hits = invoke("search", {"version": 1, "query": "green build release", "limit": 5}, cwd=sandbox.cwd, env=env)
    assert [hit["record_id"] for hit in hits["result"]] == [record_id]
    deadline = time.monotonic() + 30
    while relay.ask("status", env) is None and time.monotonic() < deadline:  # started after the search
        time.sleep(0.2)
    served = int(relay.ask("status", env)["served"])
    second = invoke("remember", {**remember, "title": "Releases are tagged on main"}, cwd=sandbox.cwd, env=env)
    assert int(relay.ask("status", env)["served"]) > served  # the daemon wrote it
    assert second["result"]["record_id"] in rows(sandbox.env[VARIABLE])
    again = invoke("search", {"version": 1, "query": "tagged on main", "limit": 5}, cwd=sandbox.cwd, env=env)
    assert second["result"]["record_id"] not in [hit["record_id"] for hit in again["result"]]  # a candidate

"""Looking after a PostgreSQL store through real `sbuf` processes on the test session's real server:
`destroy-store` removes that store's rows and leaves another store's in the same database; `status`,
`doctor` and `gc` (with `--index`) report and repair the database side; errors name the variable only."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import psycopg

from tests.helpers import Sandbox, invoke
from tests.postgres import PASSWORD

VARIABLE = "STORMBUFFER_DATABASE_URL"
KEYED = (
    "records",
    "projection_records",
    "projection_chunks",
    "projection_postings",
    "projection_stats",
    "projection_terms",
)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def field(output: str, name: str) -> str:
    """The value of the `Name: value` line of human output."""
    return next(line.split(": ", 1)[1] for line in output.splitlines() if line.startswith(f"{name}: "))


def rows_by_store(url: str) -> dict[str, dict[str, int]]:
    """Table → store → how many rows it holds of that store."""
    with psycopg.connect(url) as conn:
        return {
            table: dict(conn.execute(f"SELECT store, count(*) FROM stormbuffer.{table} GROUP BY store").fetchall())
            for table in KEYED
        }


def store_with(box: Sandbox, name: str, titles: list[str]) -> tuple[Path, str]:
    """A project of its own with a PostgreSQL store holding these records; its directory and store id."""
    project = box.base / name
    project.mkdir()
    ok(box.sbuf("--project", "init", "--engine", "postgresql", cwd=project))
    for title in titles:
        ok(box.sbuf("--project", "add", "--access", "agent", "--title", title, "--body", f"All about {title}.",
                    cwd=project))  # fmt: skip
    status = json.loads(ok(box.sbuf("--project", "status", "--json", cwd=project)))
    return project, status["project_id"]


def test_destroy_store_removes_its_rows_and_leaves_another_stores(sandbox: Sandbox) -> None:
    url = sandbox.env[VARIABLE]
    doomed, doomed_id = store_with(sandbox, "doomed", ["Release trains", "Pager rotation"])
    kept, kept_id = store_with(sandbox, "kept", ["Coffee machine"])
    before = rows_by_store(url)
    assert all(set(found) == {f"project:{doomed_id}", f"project:{kept_id}"} for found in before.values()), before

    preview = ok(sandbox.sbuf("--project", "destroy-store", "--store-id", doomed_id, "--yes",
                              "--export", str(sandbox.base / "doomed.json"), cwd=doomed))  # fmt: skip
    assert field(preview, "Canonical records") == "2"
    assert f"Destroyed store {doomed_id}" in preview
    assert not (doomed / ".sbuf").exists()
    after = rows_by_store(url)
    assert all(set(found) == {f"project:{kept_id}"} for found in after.values()), after
    assert all(after[table] == {f"project:{kept_id}": before[table][f"project:{kept_id}"]} for table in KEYED)
    assert ok(sandbox.sbuf("--project", "list", cwd=kept)).count("\n") == 1
    hits = json.loads(ok(sandbox.sbuf("--project", "search", "--json", "coffee", cwd=kept)))
    assert [hit["title"] for hit in hits] == ["Coffee machine"]

    again, again_id = store_with(sandbox, "again", [])  # the export brings the destroyed store back
    imported = ok(sandbox.sbuf("--project", "import", "--on-scope", "remap", str(sandbox.base / "doomed.json"),
                               cwd=again))  # fmt: skip
    assert field(imported, "Imported") == "2" and again_id != doomed_id


def test_destroy_store_on_an_unreachable_database_removes_nothing(sandbox: Sandbox) -> None:
    url = sandbox.env[VARIABLE]
    project, store_id = store_with(sandbox, "project", ["Kept safe"])
    closed = sandbox.env_with(**{VARIABLE: f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/nothing"})
    refused = sandbox.sbuf("--project", "destroy-store", "--store-id", store_id, "--yes", cwd=project, env=closed)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip() == (
        f"error: could not destroy selected store: the PostgreSQL database named by {VARIABLE} cannot be used: "
        "the server cannot be reached"
    )
    assert PASSWORD not in refused.stdout + refused.stderr
    assert (project / ".sbuf" / "store.toml").is_file()
    assert rows_by_store(url)["records"] == {f"project:{store_id}": 1}


def test_status_reports_the_engine_and_the_projection_never_the_url(sandbox: Sandbox) -> None:
    project, store_id = store_with(sandbox, "project", ["First note", "Second note"])
    shown = ok(sandbox.sbuf("--project", "status", cwd=project))
    assert field(shown, "Engine") == f"postgresql (database named by {VARIABLE})"
    assert field(shown, "Projection") == "2 records, 2 chunks, 0 vectors"
    assert field(shown, "Vectors").startswith("2 texts waiting to be embedded")
    assert field(shown, "Records") == "2" and field(shown, "Active") == "2"
    report = json.loads(ok(sandbox.sbuf("--project", "status", "--json", cwd=project)))
    assert report["engine"] == "postgresql" and report["database_url_env"] == VARIABLE
    assert report["projection"] == {"records": 2, "chunks": 2, "vectors": 0, "vectors_pending": 2}
    assert report["vectors_pending"] == 2 and report["record_count"] == 2
    assert sandbox.env[VARIABLE] not in shown + json.dumps(report)

    ok(sandbox.sbuf("--project", "search", "note", cwd=project))  # a read embeds the waiting chunks
    report = json.loads(ok(sandbox.sbuf("--project", "status", "--json", cwd=project)))
    assert report["projection"] == {"records": 2, "chunks": 2, "vectors": 2, "vectors_pending": 0}
    assert report["embedding_version"] and report["vectors_pending"] == 0

    tcp = sandbox.env_with(**{VARIABLE: f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/{store_id}"})
    refused = sandbox.sbuf("--project", "status", cwd=project, env=tcp)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert VARIABLE in refused.stderr and PASSWORD not in refused.stderr and "127.0.0.1" not in refused.stderr


def test_doctor_checks_the_database_and_repairs_the_projection(sandbox: Sandbox) -> None:
    url = sandbox.env[VARIABLE]
    project, store_id = store_with(sandbox, "project", ["Alpha", "Beta", "Gamma"])
    healthy = ok(sandbox.sbuf("--project", "doctor", cwd=project))
    assert field(healthy, "Index") == f"postgresql (database named by {VARIABLE})"
    assert field(healthy, "Status") == "healthy"

    with psycopg.connect(url) as conn:
        conn.execute("DELETE FROM stormbuffer.projection_records WHERE id = (SELECT min(id) FROM stormbuffer.records)")
        conn.execute("UPDATE stormbuffer.projection_records SET status = 'archived' WHERE title = 'Gamma'")
    sick = sandbox.sbuf("--project", "doctor", cwd=project)
    assert sick.returncode == 1, sick.stdout
    assert "failure: 1 record(s) not in the projection" in sick.stdout
    assert "failure: 1 record(s) changed since they were projected" in sick.stdout
    assert "failure: the projection's BM25 statistics do not match its chunks" in sick.stdout
    repaired = ok(sandbox.sbuf("--project", "doctor", "--repair", cwd=project))
    assert "Repaired: rebuilt the store's projection in its database" in repaired
    assert field(repaired, "Status") == "healthy"
    hits = json.loads(ok(sandbox.sbuf("--project", "search", "--json", "gamma", cwd=project)))
    assert [hit["title"] for hit in hits][:1] == ["Gamma"]

    with psycopg.connect(url) as conn:
        conn.execute("UPDATE stormbuffer.settings SET value = '99' WHERE name = 'schema_version'")
    wrong = sandbox.sbuf("--project", "doctor", cwd=project)
    assert wrong.returncode == 1
    assert "holds Stormbuffer schema version 99; this version uses 1" in wrong.stdout

    closed = sandbox.env_with(**{VARIABLE: f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/{store_id}"})
    unreachable = sandbox.sbuf("--project", "doctor", cwd=project, env=closed)
    assert unreachable.returncode == 1 and "Traceback" not in unreachable.stderr
    assert f"failure: the PostgreSQL database named by {VARIABLE} cannot be used: the server cannot be reached" in (
        unreachable.stdout
    )
    assert PASSWORD not in unreachable.stdout + unreachable.stderr


def test_gc_vacuums_the_projection_and_gc_index_rebuilds_it(sandbox: Sandbox) -> None:
    url = sandbox.env[VARIABLE]
    project, store_id = store_with(sandbox, "project", [f"Note {number}" for number in range(6)])
    scope = f"project:{store_id}"
    for record_id in ok(sandbox.sbuf("--project", "list", cwd=project)).splitlines()[:4]:
        ok(sandbox.sbuf("--project", "forget", record_id.split("\t")[0], "--destroy", "--yes", cwd=project))

    assert not (project / ".sbuf" / "index.sqlite3").exists()  # a PostgreSQL store makes no SQLite projection
    (project / ".sbuf" / "index.sqlite3").write_bytes(b"\0" * 4096)  # as an earlier version left one
    report = json.loads(ok(sandbox.sbuf("--project", "status", "--json", cwd=project)))
    assert report["disk_usage"]["reclaimable_bytes"] >= 4096
    dry = ok(sandbox.sbuf("--project", "gc", "--dry-run", cwd=project))
    dead = int(field(dry, "Database").split("(", 1)[1].split(" dead", 1)[0])
    assert dead > 0, dry  # the forgotten records' chunks and postings
    assert "index.sqlite3\t4096 bytes" in dry and (project / ".sbuf" / "index.sqlite3").exists()
    collected = ok(sandbox.sbuf("--project", "gc", cwd=project))
    assert field(collected, "Database").startswith("projection tables vacuumed, ")
    assert "index.sqlite3\t4096 bytes" in collected  # unused by a PostgreSQL store
    assert not (project / ".sbuf" / "index.sqlite3").exists()
    again = ok(sandbox.sbuf("--project", "gc", "--dry-run", cwd=project))
    assert "(0 dead row versions;" in field(again, "Database")

    with psycopg.connect(url) as conn:
        first_chunks = conn.execute("SELECT min(id) FROM stormbuffer.projection_chunks WHERE store = %s",
                                    (scope,)).fetchone()  # fmt: skip
    rebuilt = ok(sandbox.sbuf("--project", "gc", "--index", cwd=project))
    assert field(rebuilt, "Projection").startswith("rebuilt from 2 records (2 chunks;")
    with psycopg.connect(url) as conn:
        renewed = conn.execute("SELECT min(id), count(*) FROM stormbuffer.projection_chunks WHERE store = %s",
                               (scope,)).fetchone()  # fmt: skip
    assert renewed is not None and first_chunks is not None
    assert renewed[1] == 2 and renewed[0] > first_chunks[0]  # new rows
    assert field(ok(sandbox.sbuf("--project", "doctor", cwd=project)), "Status") == "healthy"
    hits = json.loads(ok(sandbox.sbuf("--project", "search", "--json", "note", cwd=project)))
    assert len(hits) == 2


# ---- embedding in the background ------------------------------------------------------------------


def vector_counts(url: str) -> tuple[int, int]:
    """How many chunks the database holds, and how many of them still wait for a vector."""
    with psycopg.connect(url) as conn:
        counted = conn.execute("SELECT count(*), count(*) - count(embedding) FROM stormbuffer.projection_chunks")
        found = counted.fetchone()
    assert found is not None
    return int(found[0]), int(found[1])


def wait_for_vectors(url: str, chunks: int, seconds: float = 120.0) -> tuple[int, int]:
    deadline = time.monotonic() + seconds
    while (found := vector_counts(url)) != (chunks, 0) and time.monotonic() < deadline:
        time.sleep(0.25)
    return found


def test_the_daemon_embeds_waiting_vectors_in_the_background(sandbox: Sandbox) -> None:
    from stormbuffer.daemon import relay

    url = sandbox.env[VARIABLE]
    env = sandbox.env_with(STORMBUFFER_NO_DAEMON=None)
    ok(sandbox.sbuf("--project", "init", "--engine", "postgresql"))
    for number in range(12):  # one-shot writes: every chunk waits for a vector
        ok(sandbox.sbuf("--project", "add", "--access", "agent", "--title", f"Runbook step {number}",
                        "--body", f"Step {number} of the release runbook."))  # fmt: skip
    assert vector_counts(url) == (12, 12)

    relay.start(env)  # the real daemon process, as `sbuf invoke` starts it
    deadline = time.monotonic() + 60
    while relay.ask("status", env) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert relay.ask("status", env) is not None
    search = {"version": 1, "query": "release runbook step", "limit": 3}
    context = invoke("context", {**search, "budget": 128}, cwd=sandbox.cwd, env=env)
    assert context["result"]["receipt"]["semantic_fallback"] == "vector_projection_incomplete"  # answered at once
    assert wait_for_vectors(url, 12) == (12, 0)  # the rest embedded by the daemon's backlog thread
    context = invoke("context", {**search, "budget": 128}, cwd=sandbox.cwd, env=env)
    assert context["result"]["receipt"].get("semantic_fallback") is None

    source = {"kind": "conversation", "reference": "session 9", "actor": "agent"}
    for number in range(10):  # writes through the daemon, and no read after them
        remember = {"version": 1, "title": f"Incident note {number}", "kind": "fact",
                    "body": f"Incident {number} was caused by an expired certificate.", "source": source}  # fmt: skip
        assert invoke("remember", remember, cwd=sandbox.cwd, env=env)["ok"]
    served = int(relay.ask("status", env)["served"])
    assert wait_for_vectors(url, 22) == (22, 0)
    assert int(relay.ask("status", env)["served"]) == served + 1  # nothing but status asked meanwhile
    report = json.loads(ok(sandbox.sbuf("--project", "status", "--json")))
    assert report["projection"] == {"records": 22, "chunks": 22, "vectors": 22, "vectors_pending": 0}

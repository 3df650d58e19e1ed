"""How many chunks hold each term, kept by a PostgreSQL store beside its postings: exact after every
kind of write (through real `sbuf` processes and concurrent writer processes on the test session's
real server), filled for a store made before the table existed, and checked by `doctor`. An import
(a bulk write) is followed by a vacuum of the projection."""

from __future__ import annotations

import json
import shutil
import subprocess

import psycopg

from stormbuffer.core.stores import DATABASE_URL_ENV
from stormbuffer.engines.postgresql.tables import TERM_COUNTS
from tests.engines.test_postgresql_records import REFERENCE_STORE, _writers, ok
from tests.helpers import Sandbox, editor

VARIABLE = DATABASE_URL_ENV


def counts(url: str) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """(store, term) → chunks: as the table keeps them, and as the postings count them."""
    with psycopg.connect(url) as conn:
        kept = conn.execute("SELECT store, term, chunks FROM stormbuffer.projection_terms").fetchall()
        counted = conn.execute(TERM_COUNTS).fetchall()
    return {(store, term): chunks for store, term, chunks in kept}, {(s, term): n for s, term, n in counted}


def assert_exact(url: str) -> int:
    """The kept counts are the postings' (and there are some); returns how many terms they count."""
    kept, counted = counts(url)
    assert kept == counted
    assert kept and all(chunks > 0 for chunks in kept.values())
    return len(kept)


def search(box: Sandbox, query: str) -> list[dict[str, object]]:
    found: list[dict[str, object]] = json.loads(ok(box.sbuf("--project", "search", "--json", query)))
    return found


def test_the_counts_follow_every_kind_of_write(sandbox: Sandbox) -> None:
    url = sandbox.env[VARIABLE]
    ok(sandbox.sbuf("--project", "init", "--engine", "postgresql"))
    first = ok(sandbox.sbuf("--project", "add", "--title", "Release trains", "--body", "Trains leave weekly.")).strip()
    ok(sandbox.sbuf("--project", "add", "--title", "Pager rotation", "--body", "## Who\n\nOne engineer a week.\n\n"
                    "## Handover\n\nMondays at nine, with a written checkpoint."))  # fmt: skip
    before = assert_exact(url)
    rewrite = editor(sandbox, "rebody", "path.write_text(path.read_text().replace('leave weekly', 'depart daily'))")
    ok(sandbox.sbuf("--project", "edit", first, env=sandbox.env_with(EDITOR=rewrite)))
    kept, _counted = counts(url)
    assert not any(term in ("leav", "weekli") for _store, term in kept)  # the edit took its old terms away
    assert any(term == "depart" for _store, term in kept)
    assert_exact(url)
    ok(sandbox.sbuf("--project", "archive", first))
    ok(sandbox.sbuf("--project", "restore", first))
    assert_exact(url)
    second = ok(sandbox.sbuf("--project", "supersede", first, "--kind", "decision")).strip()
    assert_exact(url)
    ok(sandbox.sbuf("--project", "forget", second, "--destroy", "--yes"))
    assert_exact(url)

    directory = sandbox.base / "directory"
    shutil.copytree(REFERENCE_STORE, directory / ".sbuf")
    exported = sandbox.base / "reference.json"
    ok(sandbox.sbuf("--project", "export", str(exported), cwd=directory))
    assert "Imported: 12\n" in ok(sandbox.sbuf("--project", "import", "--on-scope", "remap", str(exported)))
    assert assert_exact(url) > before
    with psycopg.connect(url) as conn:  # the import's commit was followed by a vacuum: every page all-visible
        pages = conn.execute("SELECT relpages, relallvisible FROM pg_class WHERE oid = "
                             "'stormbuffer.projection_postings'::regclass").fetchone()  # fmt: skip
    assert pages is not None and pages[0] == pages[1] > 0


def test_concurrent_writers_keep_the_counts_exact(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("--project", "init", "--engine", "postgresql"))
    processes = _writers(sandbox, count=4, writes=8)
    for process in processes:
        _out, err = process.communicate(timeout=240)
        assert process.returncode == 0, err
    assert assert_exact(sandbox.env[VARIABLE]) > 0


def test_a_store_made_before_the_counts_gets_them_on_open(sandbox: Sandbox) -> None:
    url = sandbox.env[VARIABLE]
    ok(sandbox.sbuf("--project", "init", "--engine", "postgresql"))
    for title in ("Release trains", "Release notes", "Pager rotation", "Coffee machine"):
        ok(sandbox.sbuf("--project", "add", "--title", title, "--body", f"All about {title.lower()} and releases."))
    expected = search(sandbox, "release pager")
    assert expected
    with psycopg.connect(url) as conn:  # as an earlier version left the database
        conn.execute("DROP TABLE stormbuffer.projection_terms")
    assert search(sandbox, "release pager") == expected  # the first process to open it fills the table
    assert_exact(url)


def test_doctor_finds_a_wrong_count_and_repair_recounts(sandbox: Sandbox) -> None:
    url = sandbox.env[VARIABLE]
    ok(sandbox.sbuf("--project", "init", "--engine", "postgresql"))
    for title in ("Alpha", "Beta"):
        ok(sandbox.sbuf("--project", "add", "--title", title, "--body", f"All about {title}."))
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE stormbuffer.projection_terms SET chunks = chunks + 1 WHERE term = 'alpha'")
        conn.execute("DELETE FROM stormbuffer.projection_terms WHERE term = 'beta'")
    sick: subprocess.CompletedProcess[str] = sandbox.sbuf("--project", "doctor")
    assert sick.returncode == 1, sick.stdout
    assert "failure: the chunk counts of 2 term(s) do not match their postings" in sick.stdout
    repaired = ok(sandbox.sbuf("--project", "doctor", "--repair"))
    assert "Status: healthy" in repaired
    assert_exact(url)

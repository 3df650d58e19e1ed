"""Recall from a store whose records live in PostgreSQL, through real `sbuf` processes: writes are
searchable at once, a read embeds the waiting chunks, and hybrid context answers from pgvector."""

from __future__ import annotations

import json

import psycopg
import pytest

from stormbuffer.core.stores import PlatformDirs, View, resolve_store
from stormbuffer.embedding import Embedder
from stormbuffer.engines.postgresql.projecting import embed_store
from stormbuffer.engines.postgresql.projection import vectors_ready
from tests.engines.conftest import VARIABLE
from tests.helpers import Sandbox, invoke

RECORDS = {
    "Deploys need a green build": "Run the whole suite before tagging a release.",
    "Staging restores": "The staging database is restored from last night's snapshot every morning.",
    "Coffee": "The espresso machine on the third floor is descaled every second Friday.",
}


def waiting_vectors(url: str) -> int:
    with psycopg.connect(url) as conn:
        (count,) = conn.execute("SELECT count(*) FROM stormbuffer.projection_chunks WHERE embedding IS NULL").fetchone()
    return int(count)


def test_a_postgresql_store_recalls_what_was_written(sandbox: Sandbox, postgres_url: str) -> None:
    assert sandbox.sbuf("--project", "init", "--engine", "postgresql").returncode == 0
    for title, body in RECORDS.items():
        added = sandbox.sbuf("--project", "add", "--access", "agent", "--title", title, "--body", body)
        assert added.returncode == 0, added.stderr
    assert waiting_vectors(postgres_url) == len(RECORDS)  # a write projects its chunks; vectors come with a read
    found = sandbox.sbuf("--project", "search", "--json", "snapshot restored")
    assert found.returncode == 0, found.stderr
    assert [hit["title"] for hit in json.loads(found.stdout)][:1] == ["Staging restores"]
    assert not (sandbox.project_root / "index.sqlite").exists()
    context = invoke("context", {"version": 1, "query": "when is the coffee machine cleaned", "budget": 256},
                     cwd=sandbox.cwd, env=sandbox.env)  # fmt: skip
    assert context["ok"], context
    assert waiting_vectors(postgres_url) == 0
    receipt = context["result"]["receipt"]
    assert receipt["retrieval_mode"] == "hybrid" and receipt.get("semantic_fallback") is None, receipt
    assert context["result"]["blocks"][0]["title"] == "Coffee"


def test_one_statement_tells_a_read_whether_vectors_wait(sandbox: Sandbox, postgres_url: str, embedder: Embedder,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    assert sandbox.sbuf("--project", "init", "--engine", "postgresql").returncode == 0
    paths = resolve_store(View.PROJECT, sandbox.cwd, PlatformDirs.from_environ(sandbox.env))
    monkeypatch.setenv(VARIABLE, postgres_url)
    assert vectors_ready(paths, embedder)  # nothing waits
    for title, body in RECORDS.items():
        assert sandbox.sbuf("--project", "add", "--access", "agent", "--title", title, "--body", body).returncode == 0
    assert not vectors_ready(paths, embedder)  # the writes left their chunks waiting
    report = embed_store(paths, embedder)
    assert report.embedded == len(RECORDS) and waiting_vectors(postgres_url) == 0
    assert vectors_ready(paths, embedder)
    with psycopg.connect(postgres_url) as conn:  # another model made the vectors
        conn.execute("UPDATE stormbuffer.projection_settings SET value = 'other' WHERE key = 'vector_model'")
    assert not vectors_ready(paths, embedder)

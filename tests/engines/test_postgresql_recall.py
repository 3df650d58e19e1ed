"""Recall from a store whose records live in PostgreSQL, through real `sbuf` processes: writes are
searchable at once, a read embeds the waiting chunks, and hybrid context answers from pgvector."""

from __future__ import annotations

import json

import psycopg

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


def test_a_postgresql_store_recalls_what_was_written(postgresql_sandbox: Sandbox, postgres_url: str) -> None:
    sandbox = postgresql_sandbox
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

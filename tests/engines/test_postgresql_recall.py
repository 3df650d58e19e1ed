"""Recall from a store whose records live in PostgreSQL, through real `sbuf` processes and in a warm
process: writes are searchable at once, a read embeds the waiting chunks (in a warm process, only
when its opening finds some), and hybrid context answers from pgvector."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from stormbuffer.core.stores import PlatformDirs, View, resolve_store
from stormbuffer.embedding import Embedder
from stormbuffer.engines.postgresql import projecting, projection
from stormbuffer.index.freshness import FreshnessRegistry
from stormbuffer.protocol import reads
from stormbuffer.protocol.session import Session
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


class Slot:
    """The embedder slot of a warm process's session."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def get(self) -> tuple[Embedder | None, str | None]:
        return self.embedder, None


def test_a_warm_read_learns_from_its_opening_whether_vectors_wait(
    sandbox: Sandbox, postgres_url: str, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert sandbox.sbuf("--project", "init", "--engine", "postgresql").returncode == 0
    dirs = PlatformDirs.from_environ(sandbox.env)
    paths = resolve_store(View.PROJECT, sandbox.cwd, dirs)
    monkeypatch.setenv(VARIABLE, postgres_url)
    openings: list[int] = []
    embedded: list[int] = []
    connected, embedding = projection._connected, projecting.embed_store

    def opening(*args: Any, **kwargs: Any) -> Any:
        openings.append(len(args[1]))  # no commands: a read's opening; else its vector search's
        return connected(*args, **kwargs)

    def embed(*args: Any, **kwargs: Any) -> Any:
        report = embedding(*args, **kwargs)
        embedded.append(report.embedded)
        return report

    monkeypatch.setattr(projection, "_connected", opening)
    monkeypatch.setattr(projecting, "embed_store", embed)
    registry = FreshnessRegistry()
    session = Session(View.PROJECT, paths, dirs, Slot(embedder), registry)

    def recall(query: str) -> list[str]:
        openings.clear()
        embedded.clear()
        answer = reads.context({"query": query, "budget": 256}, session)
        receipt = answer["receipt"]
        assert receipt["retrieval_mode"] == "hybrid" and receipt.get("semantic_fallback") is None, receipt
        return [block["title"] for block in answer["blocks"]]

    try:
        for title, body in RECORDS.items():
            added = sandbox.sbuf("--project", "add", "--access", "agent", "--title", title, "--body", body)
            assert added.returncode == 0, added.stderr
        assert waiting_vectors(postgres_url) == len(RECORDS)
        # the opening finds vectors waiting: they are embedded, then a second opening sees them
        assert recall("when is the coffee machine cleaned")[0] == "Coffee"
        assert embedded == [len(RECORDS)] and openings.count(0) == 2 and waiting_vectors(postgres_url) == 0
        # nothing waits: one opening, and no statement before it
        assert recall("staging database restored")[0] == "Staging restores"
        assert embedded == [] and openings.count(0) == 1
        with psycopg.connect(postgres_url) as conn:  # another model made the vectors: they are made again
            conn.execute("UPDATE stormbuffer.projection_settings SET value = 'other' WHERE key = 'vector_model'")
        assert recall("green build before a release")[0] == "Deploys need a green build"
        assert embedded == [len(RECORDS)] and openings.count(0) == 2
    finally:
        registry.close()

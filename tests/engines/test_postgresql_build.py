"""Building a PostgreSQL store's projection in bulk, on the test session's real server and the real
model: the records written many rows a statement, the vectors filled in steps and sent in binary,
and the HNSW index built once every vector is in."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from sqlalchemy import create_engine

from stormbuffer.core.codec import parse_markdown
from stormbuffer.core.errors import StoreIntegrityError
from stormbuffer.core.staging import FileWrite
from stormbuffer.core.stores import PlatformDirs, View, record_scope, resolve_store
from stormbuffer.embedding import Embedder
from stormbuffer.engines import open_record_store
from stormbuffer.engines.postgresql import projecting, tables
from stormbuffer.engines.postgresql.tables import HNSW_INDEX
from stormbuffer.index import backlog
from stormbuffer.index.chunking import VECTOR_CHUNKS
from tests.engines.conftest import VARIABLE
from tests.engines.test_postgresql_projection import corpus
from tests.helpers import SBUF, Sandbox
from tests.stores import make_store

CHUNKS = "stormbuffer.projection_chunks"


def engine_of(url: str) -> Any:
    return create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


def vectors_of(url: str, store: str) -> dict[tuple[str, int], tuple[np.ndarray | None, bytes | None]]:
    """(record id, ordinal) → the chunk's vector (as float32, read as real[]) and sentence vectors."""
    with psycopg.connect(url) as conn:
        found = conn.execute(f"SELECT record_id, ordinal, embedding::real[], sentence_vectors FROM {CHUNKS} "
                             "WHERE store = %s", (store,)).fetchall()  # fmt: skip
    return {(record, ordinal): (None if vector is None else np.asarray(vector, dtype="<f4"),
                                None if blob is None else bytes(blob))
            for record, ordinal, vector, blob in found}  # fmt: skip


def test_vectors_are_stored_exactly_as_the_model_gave_them(postgres_url: str) -> None:
    """The binary write keeps every float32 bit, awkward values too."""
    engine = engine_of(postgres_url)
    awkward = np.array([[1 / 3, -1e-38, 3.4e38, -0.0, 1e-45, 0.1, 2.5, -7.75]], dtype="<f4")
    try:
        with engine.begin() as conn:
            tables.create(conn, 8)
            found = tables.tables(8)
            conn.execute(found.records.insert(), [{"store": "s", "id": "r", "scope": "s", "path": "records/r.md",
                                                   "title": "t", "kind": "fact", "status": "active", "access": "agent",
                                                   "created_at": "c", "aliases": "[]", "sources": "[]"}])  # fmt: skip
            row = dict(store="s", record_id="r", ordinal=0, heading=None, text="t", embed_text="t",
                       retrieval_text="t", token_count=1, word_count=1, embed_hash="h", length=1)  # fmt: skip
            chunk = conn.execute(found.chunks.insert().returning(found.chunks.c.id), [row]).scalar()
            assert chunk is not None
            projecting._write_vectors(conn, found, [chunk], awkward, [b"\x01\x02"])
        stored = vectors_of(postgres_url, "s")
        vector, blob = stored[("r", 0)]
        assert vector is not None and vector.tobytes() == awkward[0].tobytes() and blob == b"\x01\x02"
    finally:
        engine.dispose()


def test_a_fill_in_steps_gives_the_vectors_a_projection_with_the_model_gives(
    tmp_path: Path, embedder: Embedder, postgres_url: str
) -> None:
    paths = make_store(tmp_path)
    corpus(paths)
    items = [(f"records/{path.name}", parse_markdown(path.read_bytes())) for path in sorted(paths.records.iterdir())]
    engine = engine_of(postgres_url)
    dimension = embedder.dimension
    try:
        with engine.begin() as conn:
            tables.create(conn, dimension)
            projecting.project(conn, "with-model", items, dimension=dimension, count_tokens=embedder.token_count,
                               embedder=embedder)  # fmt: skip
            written = projecting.project(conn, "filled", items, dimension=dimension,
                                         count_tokens=embedder.token_count)  # fmt: skip
        steps, left = 0, written
        while left:
            with engine.begin() as conn:
                embedded, left = projecting.fill_vectors(conn, "filled", embedder, dimension=dimension, limit=40)
            steps += 1
            assert embedded and steps < 100
        assert steps > 1  # several steps, each its own transaction
    finally:
        engine.dispose()
    expected, filled = vectors_of(postgres_url, "with-model"), vectors_of(postgres_url, "filled")
    assert filled.keys() == expected.keys()
    for key, (vector, blob) in expected.items():
        ours, our_blob = filled[key]
        if vector is None:  # past the vector cap: neither has one
            assert ours is None and our_blob is None
            continue
        assert ours is not None
        np.testing.assert_allclose(ours, vector, atol=2e-6)  # the same model; batches differ in padding only
        assert (our_blob is None) == (blob is None)
        if blob is not None and our_blob is not None:
            np.testing.assert_allclose(np.frombuffer(our_blob, "<f4"), np.frombuffer(blob, "<f4"), atol=2e-6)


def _postgresql_store(box: Sandbox, monkeypatch: pytest.MonkeyPatch) -> Any:
    result = box.sbuf("--project", "init", "--engine", "postgresql")
    assert result.returncode == 0, result.stderr
    monkeypatch.setenv(VARIABLE, box.env[VARIABLE])
    return resolve_store(View.PROJECT, box.cwd, PlatformDirs(box.base / "data", box.base / "cache"))


def _has_index(url: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT to_regclass(%s)", (f"stormbuffer.{HNSW_INDEX}",)).fetchone() != (None,)


def _bulk_written(box: Sandbox, monkeypatch: pytest.MonkeyPatch, copies: int = 1) -> tuple[Any, list[FileWrite]]:
    """A PostgreSQL store of the sandbox and the writes of `copies` × the test corpus's records into it."""
    paths = _postgresql_store(box, monkeypatch)
    scope = record_scope(paths)
    writes = []
    for copy in range(copies):
        source = make_store(box.base / f"source-{copy}")
        corpus(source)
        for path in sorted(source.records.iterdir()):
            data = path.read_bytes().replace(record_scope(source).encode(), scope.encode())
            writes.append(FileWrite(paths.records / path.name, data, None))
    return paths, writes


def _waiting(url: str) -> tuple[int, int]:
    """Chunks with a vector, and chunks waiting for one."""
    with psycopg.connect(url) as conn:
        found = conn.execute(f"SELECT count(embedding), count(*) FILTER (WHERE embedding IS NULL AND ordinal < %s) "
                             f"FROM {CHUNKS}", (VECTOR_CHUNKS,)).fetchone()  # fmt: skip
    assert found is not None
    return int(found[0]), int(found[1])


def test_a_sync_killed_mid_fill_keeps_whole_steps_and_the_next_one_completes(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = sandbox.env[VARIABLE]
    paths, writes = _bulk_written(sandbox, monkeypatch, copies=8)
    store = open_record_store(paths, record_scope(paths), 30.0, None)
    with store.locked():
        store.write_all(writes, None)
    total = _waiting(url)[1]
    assert total > 2 * backlog.DATABASE_STEP  # several steps
    process = subprocess.Popen([str(SBUF), "--project", "sync"], cwd=sandbox.cwd, env=sandbox.env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 240
    while _waiting(url)[0] == 0 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    embedded, waiting = _waiting(url)
    assert 0 < embedded < total and embedded + waiting == total  # whole steps only, none half-written
    assert embedded % backlog.DATABASE_STEP == 0
    result = sandbox.sbuf("--project", "sync")
    assert result.returncode == 0, result.stderr
    assert _waiting(url) == (total, 0)
    doctor = sandbox.sbuf("--project", "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


def test_a_bulk_write_then_sync_builds_the_hnsw_index_once_every_vector_is_in(
    sandbox: Sandbox, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths, writes = _bulk_written(sandbox, monkeypatch)
    store = open_record_store(paths, record_scope(paths), 30.0, None)
    with pytest.raises(StoreIntegrityError):  # an id twice: nothing of the bulk write is kept
        with store.locked():
            store.write_all([*writes, FileWrite(paths.records / "again.md", writes[0].data, None)], None)
    with psycopg.connect(sandbox.env[VARIABLE]) as conn:
        assert conn.execute("SELECT count(*) FROM stormbuffer.records").fetchone() == (0,)
    with store.locked():
        store.write_all(writes, None)

    monkeypatch.setattr(projecting, "HNSW_FROM", 10)  # far fewer than the store's chunks
    monkeypatch.setattr(backlog, "DATABASE_STEP", 30)
    seen: list[tuple[int, int, bool]] = []

    def progress(_phase: str, done: int, total: int, _report: Any) -> None:
        seen.append((done, total, _has_index(sandbox.env[VARIABLE])))

    report = backlog.catch_up(paths, embedder, progress=progress)
    assert report.pending == 0 and report.embedded == seen[-1][1] > 60
    assert len(seen) > 2 and [step[0] for step in seen] == sorted(step[0] for step in seen)
    assert not any(indexed for _done, _total, indexed in seen[:-1])  # no index grown through the fill
    assert seen[-1][2]  # built with the last step
    with psycopg.connect(sandbox.env[VARIABLE]) as conn:
        waiting = conn.execute(f"SELECT count(*) FROM {CHUNKS} WHERE embedding IS NULL AND ordinal < %s",
                               (VECTOR_CHUNKS,)).fetchone()  # fmt: skip
    assert waiting == (0,)

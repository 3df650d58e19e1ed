"""Warm readers: a process reads a projection again through the connection it used last, and never
through one opened on a file that is no longer the projection."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from stormbuffer.core.errors import IndexUnavailable
from stormbuffer.core.stores import StorePaths
from stormbuffer.index import projection as pj
from stormbuffer.index import readers
from stormbuffer.index.sync import reindex_store, sync_store
from stormbuffer.retrieval import SearchOptions, search
from tests.stores import make_store, write_record

LEXICAL = SearchOptions(mode="lexical")


@pytest.fixture(autouse=True)
def warm() -> Iterator[None]:
    """This test process keeps idle readers, as the daemon and the servers do."""
    readers.keep_warm()
    yield
    readers.POOL.enabled = False


@pytest.fixture
def store(tmp_path: Path) -> StorePaths:
    paths = make_store(tmp_path)
    write_record(paths, "Deploy ritual", "Two approvals before production deploys.")
    sync_store(paths, None)
    return paths


def connection_used(path: Path) -> sqlite3.Connection:
    with pj.reading(path) as conn:
        return conn


def test_a_second_read_reuses_the_connection_and_sees_new_commits(store: StorePaths) -> None:
    first = connection_used(store.index_path)
    assert connection_used(store.index_path) is first
    write_record(store, "Rollback drill", "Practise rollbacks monthly.")
    sync_store(store, None)
    assert connection_used(store.index_path) is first
    assert [hit.title for hit in search([store], "rollbacks", LEXICAL)] == ["Rollback drill"]


def test_readers_at_once_get_their_own_connections_and_at_most_two_stay_idle(store: StorePaths) -> None:
    with pj.reading(store.index_path) as one, pj.reading(store.index_path) as two:
        with pj.reading(store.index_path) as three:
            assert len({id(one), id(two), id(three)}) == 3
    closed = []
    for conn in (one, two, three):
        try:
            conn.execute("SELECT 1")
        except sqlite3.ProgrammingError:
            closed.append(conn)
    assert closed == [one]  # given back last, when two were kept already
    assert connection_used(store.index_path) in (two, three)


def test_a_projection_renamed_over_is_read_through_a_new_connection(store: StorePaths) -> None:
    before = connection_used(store.index_path)
    write_record(store, "Rollback drill", "Practise rollbacks monthly.")
    reindex_store(store, None)  # builds a new file beside the old one and renames it over
    assert connection_used(store.index_path) is not before
    with pytest.raises(sqlite3.ProgrammingError):  # closed once found stale
        before.execute("SELECT 1")
    assert [hit.title for hit in search([store], "rollbacks", LEXICAL)] == ["Rollback drill"]


def test_a_deleted_projection_is_unavailable_and_its_old_connection_is_not_used(store: StorePaths) -> None:
    connection_used(store.index_path)
    for path in store.index_path.parent.glob(store.index_path.name + "*"):
        path.unlink()
    with pytest.raises(IndexUnavailable):
        connection_used(store.index_path)


def test_a_failed_read_closes_its_connection(store: StorePaths) -> None:
    with pytest.raises(IndexUnavailable), pj.reading(store.index_path) as failed:
        failed.execute("SELECT * FROM no_such_table")
    with pytest.raises(sqlite3.ProgrammingError):
        failed.execute("SELECT 1")
    assert connection_used(store.index_path) is not failed


def test_a_forked_child_opens_its_own_connection(store: StorePaths) -> None:
    parent = connection_used(store.index_path)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            same = connection_used(store.index_path) is parent
            os.write(write, b"same" if same else b"own")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 16)
    os.waitpid(child, 0)
    assert answer == b"own"
    assert connection_used(store.index_path) is parent  # the parent's stays usable


def test_idle_connections_are_kept_for_a_bounded_number_of_files(tmp_path: Path) -> None:
    stores = [make_store(tmp_path / f"s{number}") for number in range(readers.FILES + 2)]
    first = []
    for paths in stores:
        write_record(paths, "Deploy ritual", "Two approvals.")
        sync_store(paths, None)
        first.append(connection_used(paths.index_path))
    with pytest.raises(sqlite3.ProgrammingError):  # the least recently read file's connection was closed
        first[0].execute("SELECT 1")
    assert connection_used(stores[-1].index_path) is first[-1]


def test_a_one_shot_process_closes_each_connection_after_its_read(store: StorePaths) -> None:
    readers.POOL.enabled = False
    first = connection_used(store.index_path)
    with pytest.raises(sqlite3.ProgrammingError):
        first.execute("SELECT 1")
    assert not Path(f"{store.index_path}-wal").exists()  # the last connection's close removed the log

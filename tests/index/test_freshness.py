"""Change detection of long-running processes: a real watcher on real record files, real syncs.

Watcher events arrive a few tens of milliseconds after a change, so tests wait for the state they
expect with `eventually` (a guard against a hang, never a speed assertion).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stormbuffer.core.errors import IndexBusy, StoreError
from stormbuffer.core.locks import exclusive_lock
from stormbuffer.core.stores import PlatformDirs, StorePaths, View, initialize_store, resolve_store
from stormbuffer.embedding import Embedder
from stormbuffer.index import freshness as fr
from stormbuffer.index import projection as pj
from stormbuffer.index.freshness import FreshnessRegistry, RecordsWatcher, StoreFreshness
from stormbuffer.index.sync import SyncReport, reindex_store, sync_store
from tests.stores import make_store, write_record

GUARD_S = 10.0


def eventually(condition: Callable[[], bool]) -> bool:
    """Whether `condition` holds within the guard time (polled)."""
    deadline = time.monotonic() + GUARD_S
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class CountingSync:
    """The check a `StoreFreshness` runs when it cannot skip it, counted; `after` runs once the real
    check returned."""

    def __init__(self, check: Callable[[StoreFreshness, RecordsWatcher | None, Embedder | None], SyncReport]) -> None:
        self.calls = 0
        self.after: Callable[[], None] | None = None
        self._check = check

    def __call__(self, fresh: StoreFreshness, watcher: RecordsWatcher | None, embedder: Embedder | None) -> SyncReport:
        self.calls += 1
        report = self._check(fresh, watcher, embedder)
        if self.after is not None:
            self.after()
        return report


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> CountingSync:
    counting = CountingSync(StoreFreshness._check)
    monkeypatch.setattr(StoreFreshness, "_check", lambda fresh, watcher, embedder: counting(fresh, watcher, embedder))
    return counting


@pytest.fixture
def store(tmp_path: Path) -> StorePaths:
    paths = make_store(tmp_path)
    write_record(paths, "Release rule", "Releases ship on Tuesdays.", file_name="release.md")
    return paths


@pytest.fixture
def fresh(store: StorePaths) -> Iterator[StoreFreshness]:
    watched = StoreFreshness(store)
    yield watched
    watched.close()


def synced(fresh: StoreFreshness) -> SyncReport:
    """Sync until the store is current (a sync can end dirty when its own first events arrive late)."""
    report = fresh.sync(None)
    assert report is not None
    assert eventually(lambda: fresh.sync(None) is None)
    return report


def chunk_texts(paths: StorePaths) -> list[str]:
    with pj.reading(paths.index_path) as conn:
        return sorted(row[0] for row in conn.execute("SELECT text FROM chunks"))


def last_sync(paths: StorePaths) -> str | None:
    with pj.reading(paths.index_path) as conn:
        return pj.get_setting(conn, pj.LAST_SYNC)


def test_the_first_call_syncs_and_then_nothing_runs_until_something_changes(
    fresh: StoreFreshness, syncs: CountingSync, store: StorePaths
) -> None:
    assert fresh.needs_sync()
    assert synced(fresh).indexed == 1
    calls, stamp = syncs.calls, last_sync(store)
    for _ in range(5):
        assert fresh.sync(None) is None
    assert not fresh.needs_sync()
    assert syncs.calls == calls
    assert last_sync(store) == stamp  # even the no-change check of a sync would have stamped it


def test_an_in_place_edit_of_the_same_size_is_seen(fresh: StoreFreshness, store: StorePaths) -> None:
    synced(fresh)
    path = store.records / "release.md"
    text = path.read_text(encoding="utf-8")
    edited = text.replace("Tuesdays", "Thursday")
    assert len(edited) == len(text)
    with path.open("r+", encoding="utf-8") as handle:  # the same file, rewritten in place
        handle.write(edited)
    assert eventually(fresh.needs_sync)
    report = fresh.sync(None)
    assert report is not None and report.indexed == 1
    assert any("Thursday" in text for text in chunk_texts(store))


def test_created_deleted_and_renamed_files_are_seen(fresh: StoreFreshness, store: StorePaths) -> None:
    synced(fresh)
    write_record(store, "Deploy rule", "Deploys wait for the magnetar check.", file_name="deploy.md")
    assert eventually(fresh.needs_sync)
    assert synced(fresh).indexed == 1

    os.rename(store.records / "deploy.md", store.records / "deploy-window.md")
    assert eventually(fresh.needs_sync)
    synced(fresh)
    with pj.reading(store.index_path) as conn:
        assert "records/deploy-window.md" in {row[0] for row in conn.execute("SELECT path FROM records")}

    (store.records / "deploy-window.md").unlink()
    assert eventually(fresh.needs_sync)
    assert synced(fresh).removed == 1
    assert not any("magnetar" in text for text in chunk_texts(store))


def test_a_directory_created_later_is_watched_too(fresh: StoreFreshness, store: StorePaths) -> None:
    synced(fresh)
    write_record(store, "Nested rule", "Nested records count as well.", file_name="team/ops/nested.md")
    assert eventually(fresh.needs_sync)
    assert synced(fresh).indexed == 1
    nested = store.records / "team" / "ops" / "nested.md"
    nested.write_text(nested.read_text(encoding="utf-8").replace("as well", "too, quasar"), encoding="utf-8")
    assert eventually(fresh.needs_sync)
    synced(fresh)
    assert any("quasar" in text for text in chunk_texts(store))


def test_a_change_that_lands_during_a_sync_leaves_the_store_stale(
    fresh: StoreFreshness, syncs: CountingSync, store: StorePaths
) -> None:
    synced(fresh)
    write_record(store, "Trigger", "Makes the next read sync.", file_name="trigger.md")
    assert eventually(fresh.needs_sync)
    watcher = fresh.watcher
    assert watcher is not None

    def write_while_syncing() -> None:
        seen = watcher.changes
        write_record(store, "Late rule", "Written while the sync ran: pulsar.", file_name="late.md")
        assert eventually(lambda: watcher.changes != seen)  # counted before the sync is recorded
        syncs.after = None

    syncs.after = write_while_syncing
    report = fresh.sync(None)
    assert report is not None
    assert not any("pulsar" in text for text in chunk_texts(store))  # the sync had scanned before
    assert fresh.needs_sync()
    assert synced(fresh).indexed == 1
    assert any("pulsar" in text for text in chunk_texts(store))


def test_writes_of_this_process_make_the_next_read_sync(fresh: StoreFreshness, syncs: CountingSync) -> None:
    synced(fresh)
    calls = syncs.calls
    fresh.changed()
    assert fresh.sync(None) is not None
    assert syncs.calls == calls + 1


def test_a_projection_replaced_or_removed_underneath_is_synced_again(
    fresh: StoreFreshness, syncs: CountingSync, store: StorePaths
) -> None:
    synced(fresh)
    sync_store(store)  # another process finds nothing to do: only its timestamp changes
    assert not fresh.needs_sync()

    reindex_store(store)  # another process builds a new projection
    assert fresh.needs_sync()
    synced(fresh)

    for path in store.index_path.parent.glob(store.index_path.name + "*"):
        path.unlink()
    assert fresh.needs_sync()
    calls = syncs.calls
    report = fresh.sync(None)
    assert report is not None and report.rebuilt and syncs.calls == calls + 1


def test_a_busy_projection_is_not_taken_as_current(fresh: StoreFreshness, store: StorePaths) -> None:
    synced(fresh)
    write_record(store, "Busy rule", "Written while another writer holds the projection.", file_name="busy.md")
    assert eventually(fresh.needs_sync)
    with exclusive_lock(store.projection_lock), pytest.raises(IndexBusy):
        fresh.sync(None)
    assert fresh.needs_sync()
    assert synced(fresh).indexed == 1


def test_invalid_records_are_checked_on_every_read(fresh: StoreFreshness, store: StorePaths) -> None:
    (store.records / "broken.md").write_text("not a record\n", encoding="utf-8")
    for _ in range(3):
        report = fresh.sync(None)
        assert report is not None and report.invalid_files


def test_vectors_are_refreshed_when_a_model_is_first_used(
    fresh: StoreFreshness, syncs: CountingSync, embedder: Embedder
) -> None:
    synced(fresh)
    report = fresh.sync(embedder)
    assert report is not None and report.embedded == 1
    assert eventually(lambda: fresh.sync(embedder) is None)
    calls = syncs.calls
    assert fresh.sync(None) is None and fresh.sync(embedder) is None
    assert syncs.calls == calls


def test_a_replaced_records_directory_gets_a_new_watcher(fresh: StoreFreshness, store: StorePaths) -> None:
    synced(fresh)
    first = fresh.watcher
    moved = store.root / "records-before"
    shutil.copytree(store.records, moved)
    shutil.rmtree(store.records)
    moved.rename(store.records)
    assert eventually(fresh.needs_sync)
    synced(fresh)
    assert fresh.watcher is not None and fresh.watcher is not first
    write_record(store, "After the swap", "Seen by the new watcher: nebula.", file_name="swap.md")
    assert eventually(fresh.needs_sync)
    synced(fresh)
    assert any("nebula" in text for text in chunk_texts(store))


def test_an_uninitialized_store_has_no_watcher_until_it_exists(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    paths = resolve_store(View.PROJECT, project, PlatformDirs(tmp_path / "data", tmp_path / "cache"))
    watched = StoreFreshness(paths)
    try:
        assert watched.watcher is None
        with pytest.raises(StoreError):
            watched.sync(None)
        assert watched.needs_sync()
        initialize_store(paths)
        write_record(paths, "First", "The first record of a new store.")
        report = watched.sync(None)
        assert report is not None and report.indexed == 1
        assert watched.watcher is not None
        assert eventually(lambda: watched.sync(None) is None)
    finally:
        watched.close()


def test_a_stopped_watcher_is_not_trusted(store: StorePaths) -> None:
    watcher = RecordsWatcher(store.records)
    assert watcher.trusted()
    watcher.close()
    assert eventually(lambda: not watcher.trusted())


def test_a_full_check_runs_when_the_last_one_is_too_old(store: StorePaths, syncs: CountingSync) -> None:
    now = [0.0]
    watched = StoreFreshness(store, recheck_s=60.0, clock=lambda: now[0])
    try:
        synced(watched)
        now[0] += 59.0
        assert watched.sync(None) is None
        now[0] += 2.0
        calls = syncs.calls
        assert watched.sync(None) is not None
        assert syncs.calls == calls + 1
    finally:
        watched.close()


def test_the_registry_keeps_one_watcher_per_store_and_stops_them(tmp_path: Path, store: StorePaths) -> None:
    other = make_store(tmp_path / "other")
    registry = FreshnessRegistry()
    assert registry.sync(store, None) is not None
    assert registry.sync(other, None) is not None
    watchers = [registry.store(store).watcher, registry.store(other).watcher]
    assert registry.store(store) is registry.store(store)
    assert eventually(lambda: registry.sync(store, None) is None)
    registry.changed(store)
    assert registry.sync(store, None) is not None
    registry.close()
    assert all(watcher is not None and eventually(lambda w=watcher: not w.trusted()) for watcher in watchers)


def test_shared_file_systems_are_found_in_the_mount_table(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/vda / ext4 rw 0 0\n"
        f"server:/home {tmp_path}/net\\040home nfs4 rw 0 0\n"
        f"sshfs#me@host: {tmp_path}/remote fuse.sshfs rw 0 0\n"
        f"/dev/sdb1 {tmp_path}/remote/disk fuseblk rw 0 0\n",
        encoding="utf-8",
    )
    assert fr.shared_file_system(tmp_path / "net home" / "store" / "records", mounts)
    assert fr.shared_file_system(tmp_path / "remote" / "records", mounts)
    assert not fr.shared_file_system(tmp_path / "remote" / "disk" / "records", mounts)
    assert not fr.shared_file_system(tmp_path / "net" / "records", mounts)
    assert not fr.shared_file_system(tmp_path, tmp_path / "no-mount-table")
    assert not fr.shared_file_system(tmp_path)  # this machine's real table: a local disk


def test_a_store_on_a_shared_file_system_is_checked_in_full_on_every_read(
    store: StorePaths, syncs: CountingSync, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/vda / ext4 rw 0 0\nserver:/export {store.root} nfs rw 0 0\n", encoding="utf-8")
    monkeypatch.setattr(fr, "MOUNTS", mounts)
    watched = StoreFreshness(store)
    try:
        assert watched.watcher is None
        for calls in range(1, 4):
            assert watched.sync(None) is not None
            assert syncs.calls == calls
    finally:
        watched.close()

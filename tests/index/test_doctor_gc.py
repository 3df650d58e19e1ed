"""Doctor, repair and gc on real stores: what they report, what they change, and what they never touch."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from stormbuffer.core.errors import StoreError
from stormbuffer.core.stores import StorePaths
from stormbuffer.embedding import DEFAULT_VARIANT, Embedder, acquire_model
from stormbuffer.embedding.manifest import MANIFEST_NAME
from stormbuffer.index.doctor import doctor_store, repair_store
from stormbuffer.index.gc import gc_store
from stormbuffer.index.sync import sync_store
from stormbuffer.retrieval import SearchOptions, search
from tests.embedding.cachefiles import model_dir
from tests.helpers import link_tree
from tests.stores import canonical_bytes, make_store, settle, write_record


@pytest.fixture
def store(tmp_path: Path, model_cache: Callable[[str], Path]) -> StorePaths:
    """A project store whose cache holds (hard links to) the real model."""
    link_tree(model_cache(DEFAULT_VARIANT) / "models", tmp_path / "cache" / "stormbuffer" / "models")
    return make_store(tmp_path)


def messages(paths: StorePaths) -> list[tuple[str, str]]:
    return [(issue.severity, issue.message) for issue in doctor_store(paths).issues]


def test_a_synced_store_is_healthy_and_drift_is_reported(store: StorePaths, embedder: Embedder) -> None:
    write_record(store, "Kept", "Stays as it is.", file_name="kept.md")
    write_record(store, "Edited", "Will change.", file_name="edited.md")
    write_record(store, "Deleted", "Will go.", file_name="deleted.md")
    sync_store(store, embedder)
    diagnosis = doctor_store(store)
    assert diagnosis.issues == [] and diagnosis.semantic_model_ready and diagnosis.index_path == store.index_path
    path = store.records / "edited.md"
    path.write_text(path.read_text().replace("Will change.", "Changed."))
    (store.records / "deleted.md").unlink()
    write_record(store, "New", "Not synced yet.", file_name="new.md")
    assert messages(store) == [
        ("warning", "1 record was deleted but is still in the projection (records/deleted.md)"),
        ("warning", "1 record changed since it was indexed (records/edited.md)"),
        ("warning", "1 canonical record is not indexed (records/new.md)"),
    ]
    sync_store(store)
    assert messages(store) == [("warning", "semantic vectors are missing or stale for some records")]
    sync_store(store, embedder)
    assert messages(store) == []


def test_a_model_that_opens_without_its_saved_graph_is_reported_until_init_saves_one(
    tmp_path: Path, model_cache: Callable[[str], Path], embedder: Embedder
) -> None:
    cache = tmp_path / "cache" / "stormbuffer"
    shutil.copytree(model_dir(model_cache(DEFAULT_VARIANT)), model_dir(cache))  # a copy: the manifest changes
    paths = make_store(tmp_path)
    sync_store(paths, embedder)
    manifest = model_dir(cache) / MANIFEST_NAME
    data = json.loads(manifest.read_text())
    data["optimized"]["runtime"] = "onnxruntime 0.0.1 x86_64"
    manifest.write_text(json.dumps(data))
    assert messages(paths) == [
        ("warning", "the model opens without its saved optimized graph, about twice as slowly "
                    "(the saved graph was made by onnxruntime 0.0.1 x86_64)"),
    ]  # fmt: skip
    assert doctor_store(paths).semantic_model_ready
    acquire_model(cache)
    assert messages(paths) == []


def test_repair_refuses_while_canonical_records_are_broken(store: StorePaths) -> None:
    first = write_record(store, "First", "Body.", file_name="a.md")
    write_record(store, "Copy", "Body.", record_id=first.id, file_name="b.md")
    write_record(store, "Foreign", "Body.", scope="project:elsewhere", file_name="c.md")
    broken = store.records / "d.md"
    broken.write_text("+++\nnot toml at all\n+++\n\nbody\n")
    before = canonical_bytes(store)
    report = repair_store(store)
    assert report.repaired == [] and report.diagnosis.failures == 3
    issues = {issue.message: issue.repair for issue in report.diagnosis.issues if issue.severity == "failure"}
    assert issues["canonical record records/b.md duplicates the ID first seen at records/a.md"].startswith("give each")
    assert "canonical record records/c.md is outside the selected store scope" in issues
    assert any(message.startswith("canonical record records/d.md is invalid") for message in issues)
    assert "repair the Markdown, then run `sbuf --project sync`" in issues.values()
    assert not store.index_path.exists() and canonical_bytes(store) == before


def test_repair_rebuilds_the_projection_and_removes_stale_files_but_not_symlinks(store: StorePaths) -> None:
    write_record(store, "Survivor", "Rebuilt from Markdown.")
    sync_store(store)
    store.index_path.write_bytes(b"\x00garbage" * 64)
    (store.root / "tmp").mkdir()
    (store.root / "tmp" / "stale.json").write_text("{}")
    target = store.root.parent / "outside.txt"
    target.write_text("keep me")
    os.symlink(target, store.root / "tmp" / "link")
    (store.locks / "stale.lock").write_text("")
    (store.root / ".index.sqlite3.4242.reindex.tmp").write_text("leftover")
    before = canonical_bytes(store)

    report = repair_store(store)
    assert report.repaired == [
        "rebuilt the disposable search projection",
        "removed stale disposable metadata .index.sqlite3.4242.reindex.tmp",
        "removed stale disposable metadata locks/stale.lock",
        "removed stale disposable metadata tmp/stale.json",
    ]
    assert report.diagnosis.failures == 0 and canonical_bytes(store) == before
    assert (store.root / "tmp" / "link").is_symlink() and target.read_text() == "keep me"
    assert store.mutation_lock.exists()
    assert [hit.title for hit in search([store], "rebuilt", SearchOptions(mode="lexical"))] == ["Survivor"]
    assert repair_store(store).repaired == []


def test_a_broken_store_toml_stops_sync_and_search(store: StorePaths) -> None:
    write_record(store, "Body", "Text.")
    sync_store(store)
    store.config_file.write_text("format_version = 1\nscope = [\n")
    with pytest.raises(StoreError, match="store.toml is invalid"):
        sync_store(store)
    with pytest.raises(StoreError, match="store.toml is invalid"):
        search([store], "text", SearchOptions(mode="lexical"))
    assert messages(store)[0][1].startswith("canonical store metadata is invalid: store.toml is invalid")


def test_gc_lists_then_removes_disposable_files_only(store: StorePaths, embedder: Embedder) -> None:
    record = write_record(store, "Kept record", "Never collected.")
    sync_store(store, embedder)
    (store.root / "tmp").mkdir()
    (store.root / "tmp" / "scratch").write_text("x")
    (store.records / ".abandoned.md.1.2.tmp").write_text("partial")
    settle(store.records / ".abandoned.md.1.2.tmp")
    before = canonical_bytes(store)

    dry = gc_store(store, dry_run=True)
    labels = [label for label, _ in dry.candidates]
    assert "tmp/scratch" in labels and "records/.abandoned.md.1.2.tmp" in labels
    assert not any(label.startswith("index.sqlite3") for label in labels)  # the projection is kept
    assert gc_store(store, dry_run=True, include_index=True).reclaimed_bytes > dry.reclaimed_bytes
    assert not any(label.startswith("cache/models") for label in labels)
    assert "locks/mutation.lock" not in labels and "projection.lock" not in labels
    assert dry.removed == 0 and store.index_path.exists() and dry.reclaimed_bytes > 0

    done = gc_store(store, dry_run=False)
    assert done.removed == len(dry.candidates) and store.index_path.exists()
    assert not (store.records / ".abandoned.md.1.2.tmp").exists()
    whole = gc_store(store, dry_run=False, include_index=True)
    assert sum(label.endswith(".npy") for label, _ in whole.candidates) == 2
    assert not store.index_path.exists() and not list(store.root.glob("index.sqlite3*"))
    assert canonical_bytes(store) == before and (store.records / f"{record.id}.md").is_file()
    assert any(store.models_dir.rglob("*.onnx"))

    with_models = gc_store(store, dry_run=False, include_models=True)
    assert any(label.startswith("cache/models/") for label, _ in with_models.candidates)
    assert not any(store.models_dir.rglob("*.onnx")) and (store.models_dir / ".lock").exists()
    assert canonical_bytes(store) == before

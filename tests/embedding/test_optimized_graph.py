"""The optimized graph saved at acquisition: the model's own vectors, and a clean fallback to the
model file whenever the saved graph is missing, damaged or from another onnxruntime."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from stormbuffer.embedding import Embedder, acquire_model, load_embedder, verify_model, verify_optimized_graph
from stormbuffer.embedding.manifest import MANIFEST_NAME, ModelManifest, read_manifest
from stormbuffer.embedding.sessions import MODEL_FILE, OPTIMIZED_DATA, OPTIMIZED_FILE

from .cachefiles import model_dir, rewrite_keeping_stat

TEXTS = [
    "The cat sits on the mat.",
    "How do I rotate the logs of the backup service every night?",
    "ok",
    "naïve café — 東京 🙂",
    "word " * 254,
]


def assert_same_vectors(embedder: Embedder, reference: Embedder) -> None:
    actual, expected = embedder.embed(TEXTS), reference.embed(TEXTS)
    assert np.abs(actual - expected).max() < 1e-6
    assert (np.sum(actual * expected, axis=1) >= 0.9999).all()


def acquire_messages(cache_dir: Path) -> list[str]:
    messages: list[str] = []
    acquire_model(cache_dir, progress=messages.append)
    return messages


def test_the_saved_graph_gives_the_vectors_of_the_model_file(private_cache: Path, wq8: Embedder) -> None:
    assert wq8.graph_file == OPTIMIZED_FILE
    for name in (OPTIMIZED_FILE, OPTIMIZED_DATA):
        (model_dir(private_cache) / name).unlink()
    from_model_file = load_embedder(private_cache)
    assert from_model_file.graph_file == MODEL_FILE
    assert from_model_file.model_version == wq8.model_version
    assert_same_vectors(wq8, from_model_file)


def remove_both(directory: Path) -> None:
    (directory / OPTIMIZED_FILE).unlink()
    (directory / OPTIMIZED_DATA).unlink()


def truncate_data(directory: Path) -> None:
    with (directory / OPTIMIZED_DATA).open("r+b") as handle:
        handle.truncate((directory / OPTIMIZED_DATA).stat().st_size // 2)


def zero_graph_keeping_stat(directory: Path) -> None:
    rewrite_keeping_stat(
        directory / OPTIMIZED_FILE, lambda data: data.__setitem__(slice(0, len(data)), bytes(len(data)))
    )


def record_another_runtime(directory: Path) -> None:
    data = json.loads((directory / MANIFEST_NAME).read_text())
    data["optimized"]["runtime"] = "onnxruntime 0.0.1 x86_64"
    (directory / MANIFEST_NAME).write_text(json.dumps(data))


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "missing": (
        remove_both,
        f"model file `{OPTIMIZED_FILE}` is missing; model file `{OPTIMIZED_DATA}` is missing",
    ),
    "truncated": (truncate_data, f"model file `{OPTIMIZED_DATA}` does not match its recorded sha256"),
    "unreadable": (zero_graph_keeping_stat, f"model file `{OPTIMIZED_FILE}` does not match its recorded sha256"),
    "another runtime": (record_another_runtime, "the saved graph was made by onnxruntime 0.0.1 x86_64"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_an_unusable_saved_graph_falls_back_and_acquire_restores_it(
    damage: str, private_cache: Path, wq8: Embedder
) -> None:
    directory = model_dir(private_cache)
    model_before = (directory / MODEL_FILE).stat()
    damage_files, slow_start = DAMAGE[damage]
    assert verify_optimized_graph(private_cache) is None
    damage_files(directory)

    fallback = load_embedder(private_cache)
    assert fallback.graph_file == MODEL_FILE
    assert_same_vectors(fallback, wq8)
    assert verify_model(private_cache) == []  # the model works, only opens more slowly
    assert verify_optimized_graph(private_cache) == slow_start

    messages = acquire_messages(private_cache)
    assert "optimizing the embedding model for fast loading" in messages
    assert not [m for m in messages if "building" in m]
    model_after = (directory / MODEL_FILE).stat()
    assert (model_after.st_ino, model_after.st_mtime_ns) == (model_before.st_ino, model_before.st_mtime_ns)
    assert verify_model(private_cache) == [] and verify_optimized_graph(private_cache) is None
    restored = load_embedder(private_cache)
    assert restored.graph_file == OPTIMIZED_FILE
    assert_same_vectors(restored, wq8)


def test_a_cache_written_before_saved_graphs_loads_and_gains_one(private_cache: Path, wq8: Embedder) -> None:
    directory = model_dir(private_cache)
    remove_both(directory)
    data = json.loads((directory / MANIFEST_NAME).read_text())
    del data["optimized"]
    data["format_version"] = 1
    (directory / MANIFEST_NAME).write_text(json.dumps(data))

    old = load_embedder(private_cache)
    assert (old.graph_file, old.model_version) == (MODEL_FILE, wq8.model_version)
    assert verify_model(private_cache) == []
    assert verify_optimized_graph(private_cache) == "no optimized graph is saved"

    messages = acquire_messages(private_cache)
    assert not [m for m in messages if "building" in m]
    manifest = ModelManifest.from_json((directory / MANIFEST_NAME).read_text())
    assert manifest.optimized is not None and manifest.model_version == wq8.model_version
    assert json.loads((directory / MANIFEST_NAME).read_text())["format_version"] == 2
    assert load_embedder(private_cache).graph_file == OPTIMIZED_FILE


def test_a_graph_that_cannot_be_saved_leaves_a_working_model(private_cache: Path, wq8: Embedder) -> None:
    directory = model_dir(private_cache)
    remove_both(directory)
    (directory / OPTIMIZED_FILE).mkdir()  # the saved graph cannot be renamed into place

    messages = acquire_messages(private_cache)
    assert "optimizing the embedding model for fast loading" in messages
    manifest = read_manifest(directory)
    assert manifest is not None and manifest.optimized is None
    assert not (directory / OPTIMIZED_DATA).exists()  # nothing half-written is left behind
    assert not [p.name for p in directory.iterdir() if p.name.startswith(".")]
    assert verify_model(private_cache) == []
    embedder = load_embedder(private_cache)
    assert embedder.graph_file == MODEL_FILE
    assert_same_vectors(embedder, wq8)

    (directory / OPTIMIZED_FILE).rmdir()
    acquire_model(private_cache)
    assert load_embedder(private_cache).graph_file == OPTIMIZED_FILE

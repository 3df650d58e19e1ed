"""Manifest parsing: anything malformed is refused, never half-trusted."""

from __future__ import annotations

import json

import pytest

from stormbuffer.embedding.manifest import FileRecord, ModelManifest

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
)


def test_round_trip() -> None:
    assert ModelManifest.from_json(VALID.to_json()) == VALID


@pytest.mark.parametrize(
    "change",
    [
        {"format_version": 2},
        {"unexpected": 1},
        {"dimension": "384"},
        {"max_tokens": -1},
        {"files": {}},
        {"files": {"../model.onnx": {"sha256": "ab", "size": 1, "mtime_ns": 1}}},
        {"files": {"model.onnx": {"sha256": "ab", "size": 1}}},
        {"source_hashes": ["x"]},
        {"model_id": None},
    ],
)
def test_malformed_manifests_are_refused(change: dict[str, object]) -> None:
    data = json.loads(VALID.to_json()) | change
    with pytest.raises(ValueError, match="manifest"):
        ModelManifest.from_json(json.dumps(data))


def test_not_json_is_refused() -> None:
    with pytest.raises(ValueError, match="malformed model manifest"):
        ModelManifest.from_json("{")

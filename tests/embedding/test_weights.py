"""The safetensors reader."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from stormbuffer.embedding.weights import read_safetensors


def write_safetensors(path: Path, header: dict[str, object], data: bytes) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def test_reads_tensors_by_dtype_shape_and_offsets(tmp_path: Path) -> None:
    floats = np.arange(6, dtype="<f4").reshape(2, 3)
    ints = np.array([7, -8], dtype="<i8")
    header = {
        "__metadata__": {"format": "pt"},
        "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]},
    }
    write_safetensors(tmp_path / "t.safetensors", header, floats.tobytes() + ints.tobytes())
    tensors = read_safetensors(tmp_path / "t.safetensors")
    assert set(tensors) == {"a", "b"}
    np.testing.assert_array_equal(tensors["a"], floats)
    np.testing.assert_array_equal(tensors["b"], ints)


def test_the_real_weights_have_the_expected_shapes(offline_source) -> None:
    tensors = read_safetensors(offline_source.directory / "model.safetensors")
    assert tensors["embeddings.word_embeddings.weight"].shape == (30522, 384)
    assert tensors["encoder.layer.5.intermediate.dense.weight"].shape == (1536, 384)
    assert tensors["embeddings.word_embeddings.weight"].dtype == np.float32


@pytest.mark.parametrize(
    ("header", "data", "message"),
    [
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 8, "inconsistent offsets"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, "inconsistent offsets"),
        ({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, "malformed"),
        ({"a": {"shape": [2]}}, b"", "malformed"),
    ],
)
def test_malformed_files_are_refused(tmp_path: Path, header: dict[str, object], data: bytes, message: str) -> None:
    write_safetensors(tmp_path / "t.safetensors", header, data)
    with pytest.raises(ValueError, match=message):
        read_safetensors(tmp_path / "t.safetensors")


def test_truncated_headers_are_refused(tmp_path: Path) -> None:
    (tmp_path / "t.safetensors").write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(ValueError, match="header length"):
        read_safetensors(tmp_path / "t.safetensors")
    (tmp_path / "t.safetensors").write_bytes(b"abc")
    with pytest.raises(ValueError, match="too short"):
        read_safetensors(tmp_path / "t.safetensors")

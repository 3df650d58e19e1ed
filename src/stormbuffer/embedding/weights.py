"""Read tensors from a `.safetensors` file (little-endian raw data behind a JSON header)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "?",
}
_MAX_HEADER_BYTES = 100 << 20


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Return every tensor of a safetensors file as a read-only NumPy array.

    Raises ValueError when the file is not a well-formed safetensors file.
    """
    import numpy as np

    raw = path.read_bytes()
    if len(raw) < 8:
        raise ValueError("safetensors file is too short")
    (header_len,) = struct.unpack("<Q", raw[:8])
    if header_len > min(_MAX_HEADER_BYTES, len(raw) - 8):
        raise ValueError("safetensors header length is out of range")
    try:
        header = json.loads(raw[8 : 8 + header_len])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError("safetensors header is not valid JSON") from exc
    if not isinstance(header, dict):
        raise ValueError("safetensors header is not a JSON object")
    data = memoryview(raw)[8 + header_len :]
    tensors: dict[str, np.ndarray] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = np.dtype(_DTYPES[meta["dtype"]])
            shape = [int(dim) for dim in meta["shape"]]
            start, end = (int(offset) for offset in meta["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"safetensors entry {name!r} is malformed") from exc
        expected = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        if not 0 <= start <= end <= len(data) or end - start != expected:
            raise ValueError(f"safetensors entry {name!r} has inconsistent offsets")
        tensors[name] = np.frombuffer(data[start:end], dtype=dtype).reshape(shape)
    return tensors

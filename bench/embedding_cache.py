"""A benchmark-only wrapper that remembers the real model's vectors by text, across runs.

Embedding tens of thousands of texts takes a long time on a small machine; benchmarks re-run
often. Vectors are stored in a SQLite file keyed by the sha256 of the text (and the model
checksum), so a re-run embeds only texts it has never seen. Every vector still comes from the
real model; `fresh` and `fresh_seconds` measure the model's own throughput.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


class CachingEmbedder:
    def __init__(self, real: Any, path: Path) -> None:
        self._real = real
        self.model_id, self.model_version = real.model_id, real.model_version
        self.model_checksum, self.dimension, self.max_tokens = real.model_checksum, real.dimension, real.max_tokens
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False)  # queries are embedded on a worker thread
        self._lock = threading.Lock()
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL)")
        self.fresh = 0
        self.fresh_seconds = 0.0

    def token_count(self, text: str) -> int:
        return int(self._real.token_count(text))

    def _key(self, text: str) -> str:
        return hashlib.sha256(f"{self.model_checksum}\n{text}".encode()).hexdigest()

    def embed(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            keys = [self._key(text) for text in texts]
            return np.stack(self._cached(keys, lambda missing: self._real.embed([texts[i] for i in missing])))

    def embed_spans(self, texts: list[str], spans: list[list[tuple[int, int]]]) -> tuple[np.ndarray, list[np.ndarray]]:
        """The real model's `embed_spans`, each text's vector and its spans' stored as one row block."""

        def compute(missing: list[int]) -> list[np.ndarray]:
            matrix, pooled = self._real.embed_spans([texts[i] for i in missing], [spans[i] for i in missing])
            return [np.vstack([vector[None, :], own]) for vector, own in zip(matrix, pooled, strict=True)]

        with self._lock:
            keys = [self._key(f"spans:{json.dumps(own)}\n{text}") for text, own in zip(texts, spans, strict=True)]
            blocks = [block.reshape(-1, self.dimension) for block in self._cached(keys, compute)]
        return np.stack([block[0] for block in blocks]), [block[1:] for block in blocks]

    def _cached(self, keys: list[str], compute: Callable[[list[int]], Any]) -> list[np.ndarray]:
        """The stored arrays of `keys`; those missing come from `compute(positions)` and are stored."""
        found: dict[str, bytes] = {}
        for start in range(0, len(keys), 500):
            batch = keys[start : start + 500]
            marks = ",".join("?" * len(batch))
            found.update(self._db.execute(f"SELECT key, vector FROM vectors WHERE key IN ({marks})", batch))
        missing = [index for index, key in enumerate(keys) if key not in found]
        if missing:
            started = time.perf_counter()
            arrays = compute(missing)
            self.fresh_seconds += time.perf_counter() - started
            self.fresh += len(missing)
            rows = [(keys[index], array.astype("<f4").tobytes()) for index, array in zip(missing, arrays, strict=True)]
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
            self._db.commit()
            found.update(rows)
        return [np.frombuffer(found[key], dtype="<f4") for key in keys]

"""A benchmark-only wrapper that remembers the real model's vectors by text, across runs.

Embedding tens of thousands of texts takes a long time on a small machine; benchmarks re-run
often. Vectors are stored in a SQLite file keyed by the sha256 of the text (and the model
checksum), so a re-run embeds only texts it has never seen. Every vector still comes from the
real model; `fresh` and `fresh_seconds` measure the model's own throughput.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
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
            return self._embed(texts)

    def _embed(self, texts: list[str]) -> np.ndarray:
        keys = [self._key(text) for text in texts]
        found: dict[str, bytes] = {}
        for start in range(0, len(keys), 500):
            batch = keys[start : start + 500]
            marks = ",".join("?" * len(batch))
            found.update(self._db.execute(f"SELECT key, vector FROM vectors WHERE key IN ({marks})", batch))
        missing = [index for index, key in enumerate(keys) if key not in found]
        if missing:
            started = time.perf_counter()
            vectors = self._real.embed([texts[index] for index in missing])
            self.fresh_seconds += time.perf_counter() - started
            self.fresh += len(missing)
            pairs = zip(missing, vectors, strict=True)
            rows = [(keys[index], vector.astype("<f4").tobytes()) for index, vector in pairs]
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
            self._db.commit()
            found.update(rows)
        return np.stack([np.frombuffer(found[key], dtype="<f4") for key in keys])

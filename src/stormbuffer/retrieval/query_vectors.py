"""The vectors of recent queries, by their exact text, so that a query asked again is not embedded again.

Embedding a query is about a fifth of a warm recall's CPU (4 to 5 ms of the model's run). Agents
and hooks often ask the same query again (the same prompt recalled by several tools, a team's
members asking the same question), and the model gives the same text the same vector: the last
`RECENT` queries' vectors are kept, by the exact query text, for the embedder that made them. A
different embedder (another model, or the same one reopened) starts afresh, so a vector is only
ever reused for the embedder that computed it. Each vector is kept as a read-only copy of its own:
no caller can change what the next one is given. A query being embedded is embedded once: a second
caller asking for it meanwhile waits for the first one's vector (a long-running process starts a
read's query embedding while it readies the stores, and the search then takes that vector).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from ..index.sync import Embedder

RECENT = 256  # queries kept (1.5 KB each with a 384-dimension model)


class QueryVectors:
    """Recent query vectors of one embedder at a time, least recently used dropped first."""

    def __init__(self, size: int = RECENT) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._embedder: Embedder | None = None
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._embedding: dict[tuple[int, str], Future[np.ndarray]] = {}  # by the embedder's id and the query

    def get(self, embedder: Embedder, query: str, embed: Callable[[], np.ndarray]) -> np.ndarray:
        """The vector of `query` by `embedder`: kept from before, the one another caller is computing,
        or `embed()` (run without the lock)."""
        key = (id(embedder), query)
        with self._lock:
            if self._embedder is embedder and (found := self._vectors.get(query)) is not None:
                self._vectors.move_to_end(query)
                return found
            computing = self._embedding.get(key)
            if computing is None:
                mine = self._embedding[key] = Future()
        if computing is not None:
            return computing.result()
        try:
            vector = self._computed(embedder, query, embed)
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        finally:
            with self._lock:
                del self._embedding[key]
        mine.set_result(vector)
        return vector

    def _computed(self, embedder: Embedder, query: str, embed: Callable[[], np.ndarray]) -> np.ndarray:
        """`embed()`'s vector as a read-only copy of its own, kept as the newest."""
        import numpy as np

        vector = np.array(embed())  # its own copy, whatever buffer the embedder wrote it in
        vector.flags.writeable = False
        with self._lock:
            if self._embedder is not embedder:
                self._embedder, self._vectors = embedder, OrderedDict()
            self._vectors[query] = vector
            while len(self._vectors) > self._size:
                self._vectors.popitem(last=False)
        return vector

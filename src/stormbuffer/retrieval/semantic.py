"""Vector retrieval: exact nearest chunks by cosine similarity over a store's vector matrix.

Vectors are unit length, so the dot product is the cosine. Hits report the Euclidean distance
`sqrt(2 - 2 cos)` (what the `vector:distance=…` reason shows) and score `1 / (1 + distance)`.

A chunk of several sentences (`chunking.sentences`) also has a vector per sentence, kept beside its
own in the projection. Once the nearest chunks and the lexical candidates are known, each one's
similarity is raised `SENTENCE_SHARE` of the way to its most similar sentence's, when that is
higher (`with_sentences`): one vector for a whole chunk averages a fact mentioned in passing with
the rest, and the chunk's own vector still weighs as much, so one close sentence of an unrelated
chunk cannot take the lead alone. The reasons then show the raised distance and
`vector:sentence_distance=…`, the best sentence's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..index import projection as pj
from ..index import vectors
from .chunks import Snapshot, load_chunks
from .hits import SearchHit, SearchOptions

if TYPE_CHECKING:
    import numpy as np

    from ..index.sync import Embedder

# Below this share of rows passing the filters, only those rows are multiplied.
_SUBSET_SHARE = 0.5
SENTENCE_SHARE = 0.5  # how far a chunk's similarity moves towards its best sentence's


def current_matrix(snapshot: Snapshot, embedder: Embedder) -> vectors.Matrix | None:
    """The store's vector matrix when it covers this snapshot of the projection with this model."""
    settings = snapshot.settings
    if settings.get(pj.VECTOR_MODEL) != pj.model_identity(embedder):
        return None
    layout = vectors.Layout.current(settings)
    return None if layout is None else vectors.load(snapshot.index_path, layout)


@dataclass(frozen=True)
class Nearest:
    """The nearest chunk of each of the nearest records in one matrix, best first."""

    chunks: list[int]
    similarities: list[float]


def nearest_rows(matrix: vectors.Matrix, query_vector: np.ndarray, options: SearchOptions, records: int) -> Nearest:
    """The nearest chunk of each of the `records` nearest records that pass the filters."""
    import numpy as np

    assert options.scopes is not None
    keep = matrix.rows_passing(options.statuses, options.scopes, options.access, options.kinds)
    if keep.size == 0 or records < 1:
        return Nearest([], [])
    every_row = keep.size == matrix.size
    if every_row:
        similarity, record_numbers = matrix.similarity(query_vector), matrix.rows["record"]
    elif keep.size < _SUBSET_SHARE * matrix.size:
        similarity, record_numbers = matrix.similarity(query_vector, keep), matrix.rows["record"][keep]
    else:
        similarity, record_numbers = matrix.similarity(query_vector)[keep], matrix.rows["record"][keep]
    rows = _best_rows(similarity, record_numbers, records)
    chosen = rows if every_row else keep[rows]
    return Nearest(np.asarray(matrix.rows["chunk"][chosen]).tolist(), similarity[rows].tolist())


def vector_hits(snapshot: Snapshot, nearest: Nearest, options: SearchOptions) -> list[SearchHit]:
    """The hits of the nearest chunks, read from the snapshot, best first."""
    loaded = load_chunks(snapshot, nearest.chunks, options)
    return [_scored(loaded[chunk_id].hit, similarity)
            for chunk_id, similarity in zip(nearest.chunks, nearest.similarities, strict=True)
            if chunk_id in loaded]  # fmt: skip


def similar_hits(matrix: vectors.Matrix, query_vector: np.ndarray, hits: list[SearchHit]) -> list[SearchHit]:
    """Vector hits for the chunks of `hits` (lexical candidates), each scored by its own similarity to
    the query: hybrid fusion then weighs what the vector side says of every candidate, rather than
    nothing for a chunk just past the nearest rows (which keep their own hit of the same chunk)."""
    import numpy as np

    candidates = {hit.chunk: hit for hit in hits}
    if not candidates:
        return []
    position, found = matrix.rows_of(np.fromiter(sorted(candidates), dtype=np.int64))
    positions = position[found]
    chunks, similarities = matrix.rows["chunk"][positions].tolist(), matrix.similarity(query_vector, positions).tolist()
    return [_scored(replace(candidates[chunk_id], bm25=0.0), similarity)
            for chunk_id, similarity in zip(chunks, similarities, strict=True)]  # fmt: skip


def sentence_blobs(snapshot: Snapshot, chunks: Iterable[int]) -> dict[int, bytes]:
    """Chunk id → its sentences' vectors (float32 rows, one blob), for those of `chunks` that have them.

    Hybrid search reads the lexical candidates' blobs while the query is still being embedded."""
    wanted = list(chunks)
    if not wanted:
        return {}
    return dict(snapshot.conn.execute(
        "SELECT c.id, v.sentence_vectors FROM chunks AS c JOIN vectors AS v ON v.embed_hash = c.embed_hash "
        f"WHERE v.sentence_vectors IS NOT NULL AND c.id IN ({', '.join('?' * len(wanted))})", wanted
    ).fetchall())  # fmt: skip


def with_sentences(hits: list[SearchHit], query_vector: np.ndarray, blobs: Mapping[int, bytes]) -> list[SearchHit]:
    """`hits` (vector hits), each similarity raised `SENTENCE_SHARE` of the way to its chunk's most
    similar sentence's when that is higher; `blobs` holds the sentences of (at least) their chunks."""
    import numpy as np

    found = [(hit.chunk, blobs[hit.chunk]) for hit in hits if hit.chunk in blobs]
    if not found:
        return hits
    width = 4 * query_vector.size
    sentences = np.frombuffer(b"".join(blob for _chunk, blob in found), dtype="<f4").reshape(-1, query_vector.size)
    starts = np.cumsum([0] + [len(blob) // width for _chunk, blob in found[:-1]])
    closest = np.maximum.reduceat(np.einsum("ij,j->i", sentences, query_vector), starts).tolist()
    best = dict(zip((chunk for chunk, _blob in found), closest, strict=True))
    for hit in hits:
        sentence = best.get(hit.chunk)
        own = 1.0 - (hit.vector_distance or 0.0) ** 2 / 2.0
        if sentence is not None and sentence > own:
            _scored(hit, own + SENTENCE_SHARE * (sentence - own))
            hit.match_reasons.append(f"vector:sentence_distance={_distance(sentence):.6f}")
    return hits


def _distance(similarity: float) -> float:
    return math.sqrt(max(0.0, 2.0 - 2.0 * similarity))


def _scored(hit: SearchHit, similarity: float) -> SearchHit:
    """`hit` as a vector hit of this cosine similarity."""
    distance = _distance(similarity)
    hit.score = 1.0 / (1.0 + distance)
    hit.vector_distance = distance
    hit.lexical_match_reason = "vector"
    hit.match_reasons = [f"vector:distance={distance:.6f}"]
    return hit


def _best_rows(similarity: np.ndarray, record_numbers: np.ndarray, records: int) -> np.ndarray:
    """Positions of each record's most similar row, best first (ties by position), for the best `records`."""
    import numpy as np

    total = similarity.size
    take = min(total, records * 4)
    while True:
        if take < total:
            top = np.argpartition(similarity, total - take)[total - take :]
            top.sort()
        else:
            top = np.arange(total)
        order = top[np.argsort(-similarity[top], kind="stable")]
        _, first = np.unique(record_numbers[order], return_index=True)
        if first.size >= records or take == total:
            return order[np.sort(first)[:records]]
        take = min(total, take * 4)

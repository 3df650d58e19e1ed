"""Vector retrieval: scoring the nearest chunks by cosine similarity (each engine's `VectorSearch` finds them).

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
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..engines.projection import Nearest, Projection, VectorSearch
from .chunks import load_chunks
from .hits import SearchHit, SearchOptions

if TYPE_CHECKING:
    import numpy as np

SENTENCE_SHARE = 0.5  # how far a chunk's similarity moves towards its best sentence's


def vector_hits(projection: Projection, nearest: Nearest, options: SearchOptions,
                known: Mapping[int, SearchHit] | None = None) -> list[SearchHit]:  # fmt: skip
    """The hits of the nearest chunks, best first. A chunk in `known` (chunk id → a hit of it read
    from this projection with these options, such as a lexical candidate) is copied from there;
    the others are read from the projection."""
    known = known or {}
    loaded = {chunk_id: chunk.hit for chunk_id, chunk in
              load_chunks(projection, [chunk_id for chunk_id in nearest.chunks if chunk_id not in known],
                          options).items()}  # fmt: skip
    for chunk_id in nearest.chunks:
        if chunk_id in known:
            loaded[chunk_id] = known[chunk_id].copied(bm25=0.0)  # as read: the vector side has no BM25
    return [_scored(loaded[chunk_id], similarity)
            for chunk_id, similarity in zip(nearest.chunks, nearest.similarities, strict=True)
            if chunk_id in loaded]  # fmt: skip


def similar_hits(search: VectorSearch, query_vector: np.ndarray, hits: list[SearchHit]) -> list[SearchHit]:
    """Vector hits for the chunks of `hits` (lexical candidates), each scored by its own similarity to
    the query: hybrid fusion then weighs what the vector side says of every candidate, rather than
    nothing for a chunk just past the nearest rows (which keep their own hit of the same chunk)."""
    candidates = {hit.chunk: hit for hit in hits}
    if not candidates:
        return []
    chunks, similarities = search.similarities(query_vector, sorted(candidates))
    return [_scored(candidates[chunk_id].copied(bm25=0.0), similarity)
            for chunk_id, similarity in zip(chunks, similarities, strict=True)]  # fmt: skip


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

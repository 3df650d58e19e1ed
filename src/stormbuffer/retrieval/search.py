"""Search across the selected stores: lexical, semantic or hybrid, with honest fallbacks.

Each store is read from one snapshot of its projection, without a lock; the caller syncs first.
Hybrid needs an embedder and, in every store, a vector matrix that matches the projection and the
model. Otherwise the search runs lexically and reports why (`semantic_fallback`):

- no embedder: the caller's reason, default `intentionally_unavailable`;
- a store's vectors are stale or missing: the caller's reason (e.g. `vector_projection_busy`
  when its sync found a writer at work), default `vector_projection_unavailable`;
- the model fails on the query: `embedding_execution_failed`.

A store whose vectors are still being embedded (`VECTOR_PENDING`) is searched hybrid with the
vectors it has, every chunk lexically: the ranking then reports `vector_projection_incomplete`.

Ordering: hybrid and semantic hits are ordered by score, the current scope breaking exact ties;
the +0.1 current-scope boost makes an equally relevant project memory come before a global one,
while a clearly more relevant global memory can still rank first. Lexical-only results keep
several chunks per record and are ordered by kind of match, then scope, then bm25 (see
`hits.by_lexical_tier`). A hybrid query that names a time (`timeref`) also prefers records near
it, relative to `options.now` (default: the clock).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING

from ..core.stores import StorePaths, record_scope
from ..engines import projection as engine
from ..engines.projection import Nearest, Projection, VectorSearch
from ..index import postings
from ..index import projection as pj
from . import timeref
from .fusion import fuse
from .hits import SearchHit, SearchOptions, by_lexical_tier, by_score
from .lexical import lexical_hits
from .query_vectors import QueryVectors
from .semantic import similar_hits, vector_hits, with_sentences

if TYPE_CHECKING:
    import numpy as np

    from ..index.sync import Embedder

Opener = Callable[[], AbstractContextManager[Projection]]  # opens one store's projection for reading

CANDIDATE_RECORDS = 50  # depth (in records) of each list fused in hybrid mode, at least the limit
LEXICAL_CHUNKS_PER_RECORD = 2
_EMBEDDING = ThreadPoolExecutor(max_workers=2, thread_name_prefix="stormbuffer-query-embedding")  # threads start lazily
_RECENT = QueryVectors()  # the vectors of recent queries (`query_vectors`)


@dataclass
class Ranking:
    """The hits found, best first, and how they were found.

    Hybrid and semantic rankings hold at most `limit` records; a lexical ranking holds up to
    `limit` chunks from each store (the context budget counts the rest as omitted).
    """

    hits: list[SearchHit]
    mode: str  # "lexical", "semantic" or "hybrid"
    semantic_fallback: str | None  # set in a hybrid ranking only when vectors were incomplete
    embedding_model: str | None
    embedding_version: str | None


class _SemanticUnavailable(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def effective_options(stores: list[StorePaths], options: SearchOptions) -> SearchOptions:
    """Fill in the default scopes (every selected store's own scope) and the current scope."""
    scopes = tuple(dict.fromkeys(record_scope(paths) for paths in stores))
    return options.with_defaults(scopes, scopes[0] if scopes else None)


def rank(
    stores: list[StorePaths],
    query: str,
    options: SearchOptions,
    *,
    embedder: Embedder | None = None,
    fallback: str | None = None,
) -> Ranking:
    """Rank the hits of `query` in the stores; `options` must have its defaults filled in."""
    openers = [partial(engine.reading, paths) for paths in stores]
    return rank_projections(openers, query, options, embedder=embedder, fallback=fallback)


def rank_projections(
    openers: Sequence[Opener],
    query: str,
    options: SearchOptions,
    *,
    embedder: Embedder | None = None,
    fallback: str | None = None,
) -> Ranking:
    """`rank` over the projections the openers open (one store each), whichever engines keep them."""
    wanted = options.mode
    if wanted == "lexical" or embedder is None:
        return _lexical(openers, query, options, fallback or "intentionally_unavailable")
    try:
        return _semantic(openers, query, options, embedder, wanted, fallback)
    except _SemanticUnavailable as exc:
        return _lexical(openers, query, options, exc.reason)


def search(
    stores: list[StorePaths],
    query: str,
    options: SearchOptions | None = None,
    *,
    embedder: Embedder | None = None,
    fallback: str | None = None,
) -> list[SearchHit]:
    """The best hits of `query`, at most `options.limit` (clamped to 1..100)."""
    options = effective_options(stores, options or SearchOptions())
    ranking = rank(stores, query, options, embedder=embedder, fallback=fallback)
    return ranking.hits[: options.bounded_limit]


def _lexical(openers: Sequence[Opener], query: str, options: SearchOptions, reason: str) -> Ranking:
    limit = options.bounded_limit
    hits: list[SearchHit] = []
    for opened in openers:
        with opened() as projection:
            found = lexical_hits(projection, query, options, limit * 10)
        hits.extend(sorted(found, key=by_lexical_tier)[:limit])
    return Ranking(sorted(hits, key=by_lexical_tier), "lexical", reason, None, None)


def _semantic(openers: Sequence[Opener], query: str, options: SearchOptions, embedder: Embedder, wanted: str,
              fallback: str | None) -> Ranking:  # fmt: skip
    """Hybrid or semantic ranking. A worker thread embeds the query while the snapshots open (a database's
    take round trips), hands its vector over, and finds the nearest rows of every store's matrix;
    meanwhile this thread runs the lexical queries and reads their candidates' sentence vectors, then,
    with the vector, weighs those candidates while the worker is still multiplying (the model, NumPy's
    products and SQLite all release the GIL). The nearest rows' hits and sentences are read last."""
    hybrid = wanted == "hybrid"
    lexical: list[SearchHit] = []
    semantic: list[SearchHit] = []
    without_vectors: set[tuple[str, int]] = set()  # lexical candidates past the vector cap or still waiting
    depth = max(CANDIDATE_RECORDS, options.bounded_limit)
    searched: Future[list[VectorSearch]] = Future()  # the stores' vector searches, once their snapshots are open
    embedded: Future[np.ndarray] = Future()
    pending = _EMBEDDING.submit(_nearest, embedder, query, searched, options, depth, embedded) \
        if postings.words(query) else None  # fmt: skip
    try:
        with ExitStack() as stack:
            snapshots = [stack.enter_context(opened()) for opened in openers]
            current = [snapshot.vector_search(embedder) for snapshot in snapshots]
            matrices = [matrix for matrix in current if matrix is not None]
            if len(matrices) < len(snapshots):
                raise _SemanticUnavailable(fallback or "vector_projection_unavailable")
            searched.set_result(matrices)
            if pending is not None:
                chunks = depth * LEXICAL_CHUNKS_PER_RECORD
                matched = [lexical_hits(snapshot, query, options, chunks) if hybrid else [] for snapshot in snapshots]
                sentences = [snapshot.sentence_blobs({hit.chunk for hit in own})
                             for snapshot, own in zip(snapshots, matched, strict=True)]  # fmt: skip
                vector = embedded.result()
                similar = [with_sentences(similar_hits(matrix, vector, own), vector, blobs)
                           for matrix, own, blobs in zip(matrices, matched, sentences, strict=True)]  # fmt: skip
                for snapshot, found, own, blobs, weighed in zip(snapshots, pending.result(), matched, sentences,
                                                                similar, strict=True):  # fmt: skip
                    near = vector_hits(snapshot, found, options, {hit.chunk: hit for hit in own})
                    known = {hit.chunk for hit in near}
                    blobs.update(snapshot.sentence_blobs(known - blobs.keys()))
                    semantic += with_sentences(near, vector, blobs)
                    semantic += [hit for hit in weighed if hit.chunk not in known]
                    lexical += own
                    weighed_chunks = {hit.chunk for hit in weighed}
                    without_vectors.update(
                        (hit.record_id, hit.ordinal) for hit in own if hit.chunk not in weighed_chunks
                    )
    finally:
        if not searched.done():  # no search after all: the worker ends with the query's vector
            searched.set_result([])
        if pending is not None:
            pending.cancel()
    lexical.sort(key=by_score)
    semantic.sort(key=by_score)
    limit = options.bounded_limit
    if hybrid:
        time = timeref.parse(query, options.now or datetime.now(UTC))
        hits = fuse(lexical, semantic, options.current_scope, limit, time, frozenset(without_vectors))
    else:
        hits = _one_per_record(semantic)[:limit]
    incomplete = any(pj.pending_vectors(snapshot.settings) for snapshot in snapshots)
    return Ranking(hits, wanted, "vector_projection_incomplete" if incomplete else None, embedder.model_id,
                   embedder.model_version)  # fmt: skip


def embed_ahead(embedder: Embedder, query: str, options: SearchOptions) -> None:
    """Start embedding `query` on the search's worker threads, for a search about to be made with
    `options` (nothing for a lexical one, or a query without words): the search then takes the vector
    from `_RECENT` instead of embedding it after the stores are ready."""
    if options.mode != "lexical" and postings.words(query):
        _EMBEDDING.submit(_RECENT.get, embedder, query, partial(_embed_query, embedder, query))


def _nearest(embedder: Embedder, query: str, searched: Future[list[VectorSearch]], options: SearchOptions,
             depth: int, embedded: Future[np.ndarray]) -> list[Nearest]:  # fmt: skip
    """The query's vector (a recent query's is reused), handed over through `embedded` as soon as it is
    known, then its nearest rows in the vectors of each store `searched` gives (this runs on the worker
    thread)."""
    try:
        vector = _RECENT.get(embedder, query, partial(_embed_query, embedder, query))
    except BaseException as exc:
        embedded.set_exception(exc)
        raise
    embedded.set_result(vector)
    return [matrix.nearest(vector, options, depth) for matrix in searched.result()]


def _embed_query(embedder: Embedder, query: str) -> np.ndarray:
    """The query's vector; a query over the model's token limit is embedded from its leading words."""
    from ..embedding.errors import EmbeddingFailed

    text = query.strip()
    try:
        if embedder.token_count(text) > embedder.max_tokens:
            words = text.split()
            low, high = 0, len(words)  # the longest prefix of words that fits
            while high - low > 1:
                middle = (low + high) // 2
                if embedder.token_count(" ".join(words[:middle])) <= embedder.max_tokens:
                    low = middle
                else:
                    high = middle
            text = " ".join(words[:low]) or text[: embedder.max_tokens // 2]
        return embedder.embed([text])[0]
    except (ValueError, EmbeddingFailed):
        raise _SemanticUnavailable("embedding_execution_failed") from None


def _one_per_record(hits: list[SearchHit]) -> list[SearchHit]:
    seen: set[str] = set()
    unique = []
    for hit in hits:
        if hit.record_id not in seen:
            seen.add(hit.record_id)
            unique.append(hit)
    return unique

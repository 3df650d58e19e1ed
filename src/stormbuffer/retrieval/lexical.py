"""Lexical retrieval: BM25 over the retrieval text (the projection's postings), plus match-kind boosts.

Which chunks match and how BM25 weighs them is `index.postings`: the query's stemmed words without
stopwords (`query_terms`), each matching itself or, when the index lacks it, as a prefix; terms
found in half of the chunks or more left out while rarer ones remain.

Score, increasing with relevance: `boost + 0.5 * s / (1 + s)` with `s` the BM25 score. The BM25
part stays below 0.5, the gap between neighbouring boosts, so a stronger kind of match (exact
title, exact file name, exact alias, phrase, prefix, term) always outranks a weaker one and BM25
orders hits within a kind.

Filters (status, scope, access, kind) apply before the limit: the best chunks are read with their
records in growing batches, best first, until enough pass.
"""

from __future__ import annotations

import re

from ..engines.projection import Projection
from ..index import postings
from .chunks import LoadedChunk, load_chunks
from .hits import LEXICAL_BOOSTS, SearchHit, SearchOptions

BM25_SHARE = 0.5
MAX_CANDIDATE_CHUNKS = 1000


def lexical_hits(projection: Projection, query: str, options: SearchOptions, limit: int) -> list[SearchHit]:
    """Up to `limit` best chunks of one store that pass the filters, scored, each with one
    `lexical:<reason>` reason."""
    terms = postings.query_terms(query)
    if not terms or limit < 1:
        return []
    limit = min(limit, MAX_CANDIDATE_CHUNKS)
    stats = postings.Stats.of(projection.settings)
    reasons = _Reasons(query, terms)
    hits: list[SearchHit] = []
    seen, fetch = 0, limit + limit // 4 + 4  # a little more than needed: usually enough pass the filters
    while True:
        chunk_ids, scores = postings.rank(projection.terms, terms, stats, fetch)
        for start in range(seen, chunk_ids.size, MAX_CANDIDATE_CHUNKS):
            batch = chunk_ids[start : start + MAX_CANDIDATE_CHUNKS].tolist()
            loaded = load_chunks(projection, batch, options)
            for chunk_id, strength in zip(batch, scores[start : start + len(batch)].tolist(), strict=True):
                chunk = loaded.get(chunk_id)
                if chunk is None:
                    continue
                reason = reasons.of(chunk)
                chunk.hit.score = LEXICAL_BOOSTS[reason] + BM25_SHARE * strength / (1.0 + strength)
                chunk.hit.lexical_match_reason = reason
                chunk.hit.bm25 = strength
                chunk.hit.match_reasons = [f"lexical:{reason}"]
                hits.append(chunk.hit)
                if len(hits) == limit:
                    return hits
        if chunk_ids.size < fetch:  # every match was read
            return hits
        seen, fetch = chunk_ids.size, fetch * 4


class _Reasons:
    """The strongest way a (trimmed, lowercased) query matches a chunk."""

    def __init__(self, query: str, terms: list[str]) -> None:
        self.needle = query.strip().lower()
        alternatives = "|".join(re.escape(term) for term in sorted(set(terms), key=len))
        self.word_prefix = re.compile(rf"(?<!\w)(?:{alternatives})")  # a term that begins some word

    def of(self, chunk: LoadedChunk) -> str:
        needle = self.needle
        if chunk.hit.title.lower() == needle:
            return "exact_title"
        if chunk.file_name.lower() == needle:
            return "exact_filename"
        aliases = [alias.lower() for alias in chunk.aliases]
        if needle in aliases:
            return "exact_alias"
        text = chunk.hit.text.lower()
        if " " in needle and (needle in text or any(needle in alias for alias in aliases)):
            return "phrase"
        if self.word_prefix.search(text):
            return "prefix"
        return "term"

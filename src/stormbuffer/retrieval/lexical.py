"""Lexical retrieval: FTS5 bm25 over the retrieval text, plus match-kind boosts.

Matching: the phrase of all query terms OR each term as a prefix. A term found in at least half
of the chunks gets no weight from bm25 (its inverse document frequency is not positive; FTS5
floors it to ~0), so it is left out of the OR when rarer terms remain: rows that match only such
words ("the", "to", "of") are not evaluated at all, which keeps queries fast on large stores
without changing how the remaining rows rank.

Score, increasing with relevance: `boost + 0.5 * s / (1 + s)` with `s = -bm25` (bm25 is negative,
more negative is better). The bm25 part stays below 0.5, the gap between neighbouring boosts, so
a stronger kind of match (exact title, exact file name, exact alias, phrase, prefix, term) always
outranks a weaker one and bm25 orders hits within a kind.

Filters (status, scope, access, kind) apply before the limit. The best chunks are read from the
full-text index alone and then filtered; only when too few pass is the query run again with the
filters inside it (slower, as every match is joined to its record).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..index import fts
from .chunks import LoadedChunk, Snapshot, load_chunks
from .hits import LEXICAL_BOOSTS, SearchHit, SearchOptions

BM25_SHARE = 0.5
MAX_CANDIDATE_CHUNKS = 1000
_ROW_COUNT_CACHE = 16  # projections whose chunk statistics are kept
_row_counts: OrderedDict[tuple[str, str, str], tuple[int, dict[str, int]]] = OrderedDict()
_row_counts_lock = threading.Lock()


def lexical_hits(snapshot: Snapshot, query: str, options: SearchOptions, limit: int) -> list[SearchHit]:
    """Up to `limit` best chunks of one store that pass the filters, scored, each with one
    `lexical:<reason>` reason."""
    terms = fts.query_terms(query)
    if not terms or limit < 1:
        return []
    limit = min(limit, MAX_CANDIDATE_CHUNKS)
    match = fts.match_expression(terms, weighted_terms(snapshot, terms))
    fetch = limit + limit // 4 + 4  # a little more than needed: usually enough pass the filters
    ranked = fts.ranked_chunks(snapshot.conn, match, fetch)
    loaded = load_chunks(snapshot, (chunk_id for chunk_id, _ in ranked), options)
    if len(loaded) < limit and len(ranked) == fetch:  # the filters exclude many: filter inside the query
        filters = fts.Filters(options.statuses, options.scopes or (), options.access, options.kinds)
        ranked = fts.ranked_chunks(snapshot.conn, match, limit, filters)
        loaded = load_chunks(snapshot, (chunk_id for chunk_id, _ in ranked), options)
    needle = query.strip().lower()
    prefixes = tuple(dict.fromkeys(terms))
    hits = []
    for chunk_id, bm25 in ranked:
        chunk = loaded.get(chunk_id)
        if chunk is None:
            continue
        reason = match_reason(needle, prefixes, chunk)
        strength = max(0.0, -bm25)
        chunk.hit.score = LEXICAL_BOOSTS[reason] + BM25_SHARE * strength / (1.0 + strength)
        chunk.hit.lexical_match_reason = reason
        chunk.hit.match_reasons = [f"lexical:{reason}"]
        hits.append(chunk.hit)
        if len(hits) == limit:
            break
    return hits


def weighted_terms(snapshot: Snapshot, terms: list[str]) -> list[str]:
    """The distinct terms found in fewer than half of the chunks (all terms when there is none)."""
    key = snapshot.generation_key
    with _row_counts_lock:
        cached = _row_counts.get(key)
        if cached is not None:
            _row_counts.move_to_end(key)
    if cached is None:
        cached = (fts.row_count(snapshot.conn), {})
    total, counts = cached
    unique = list(dict.fromkeys(terms))
    found = {term: counts[term] if term in counts else fts.term_rows(snapshot.conn, term) for term in unique}
    with _row_counts_lock:
        counts.update(found)
        _row_counts[key] = cached
        while len(_row_counts) > _ROW_COUNT_CACHE:
            _row_counts.popitem(last=False)
    weighted = [term for term in unique if 2 * found[term] < total]
    return weighted or unique


def match_reason(needle: str, terms: tuple[str, ...], chunk: LoadedChunk) -> str:
    """The strongest way the (trimmed, lowercased) query matches this chunk."""
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
    if any(word.startswith(terms) for word in fts.query_terms(text)):
        return "prefix"
    return "term"

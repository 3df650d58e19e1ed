"""The statements a reader of a PostgreSQL projection sends (`projection`), as SQL text made once.

A recall runs the same few statements again and again with other values: written as text with named
parameters (psycopg's `%(name)s`) they cost no SQLAlchemy compilation per call, and psycopg prepares
each one on the server after its fifth run on a connection, so a warm process sends them ready-parsed.
Lists (chunk ids, scopes, statuses) are one array parameter each (`= ANY(...)`), so a statement's text
does not change with their length. Their rows come in PostgreSQL's binary format (`projection`).
"""

from __future__ import annotations

from functools import cache

from ...index.chunking import VECTOR_CHUNKS
from .schema import SCHEMA
from .tables import HNSW_INDEX, TERMS_TABLE

_CHUNKS, _RECORDS = f"{SCHEMA}.projection_chunks", f"{SCHEMA}.projection_records"

# What a reader needs first (`projection.reading`): the store's settings (a JSON object), its BM25
# statistics, how many chunks wait for a vector (counted from the partial index of those, whose
# predicate is written out: a parameter would keep a generic plan from using it), whether the HNSW
# index answers (NULL: search exactly), and the snapshot's id for the vector search's connection. It
# also prices random page reads as the cached projection costs them, for this transaction.
_OPENING = f"""
SELECT (SELECT json_object_agg(key, value) FROM {SCHEMA}.projection_settings WHERE store = %(store)s),
  (SELECT chunks FROM {SCHEMA}.projection_stats WHERE store = %(store)s),
  (SELECT terms FROM {SCHEMA}.projection_stats WHERE store = %(store)s),
  (SELECT count(*) FROM {_CHUNKS} WHERE store = %(store)s AND embedding IS NULL AND ordinal < {int(VECTOR_CHUNKS)}),
  {{indexed}} IS NOT NULL, pg_export_snapshot(), set_config('random_page_cost', %(random_page_cost)s, true)
"""
OPENING = _OPENING.format(indexed=f"to_regclass('{SCHEMA}.{HNSW_INDEX}')")
OPENING_EXACT = _OPENING.format(indexed="NULL")  # searches vectors exactly even past the threshold

# One posting as 8 big-endian bytes: the chunk id (4), then its count and length (2 each: both are stored
# saturated at `postings.MAX_COUNT`), as one 64-bit integer: a third of the work of joining three pieces,
# which was most of the cost of a common term's postings.
_PACKED = "int8send((chunk::int4::int8 << 32) | (count::int8 << 16) | length)"
_POSTINGS = f"(SELECT string_agg({_PACKED}, ''::bytea ORDER BY chunk) FROM {SCHEMA}.projection_postings AS p"
# The query terms' chunk counts and postings (`PostgresTerms.own`). A term's postings are packed only
# if it is one of `packed` (this connection's share of the terms) and in fewer than half of the `total`
# chunks or no other term is proven to be: a term of the
# index that is (`own`), or a term of none whose prefixed terms are in fewer than half of the chunks
# together (`prefixed`: their sum bounds the chunks it matches from above).
OWN = f"""
WITH own AS (
  SELECT term, chunks FROM {SCHEMA}.{TERMS_TABLE} WHERE store = %(store)s AND term = ANY(%(terms)s::text[])
), prefixed AS (
  SELECT sum(t.chunks) AS chunks FROM unnest(%(lows)s::text[], %(highs)s::text[]) AS q (low, high)
  JOIN {SCHEMA}.{TERMS_TABLE} AS t ON t.store = %(store)s AND t.term > q.low COLLATE "C" AND t.term < q.high COLLATE "C"
  WHERE q.low NOT IN (SELECT term FROM own) GROUP BY q.low
), proven AS (
  SELECT EXISTS (SELECT FROM own WHERE 2 * chunks < %(total)s)
    OR EXISTS (SELECT FROM prefixed WHERE 2 * chunks < %(total)s) AS rarer
)
SELECT own.term, own.chunks, CASE WHEN own.term = ANY(%(packed)s::text[])
  AND (2 * own.chunks < %(total)s OR NOT (SELECT rarer FROM proven)) THEN
  {_POSTINGS} WHERE p.store = %(store)s AND p.term = own.term) END
FROM own
"""
# The postings of every term after `low` and before `high` (those that begin with a query word that is
# no term of the index), packed per term as `OWN` packs them, in term order.
PREFIXED = f"""
SELECT term, string_agg({_PACKED}, ''::bytea ORDER BY chunk) FROM {SCHEMA}.projection_postings
WHERE store = %(store)s AND term > %(low)s AND term < %(high)s GROUP BY term ORDER BY term
"""
# The same for a word ending in the last code point, which has no string after all its extensions.
PREFIXED_TO_THE_END = f"""
SELECT term, string_agg({_PACKED}, ''::bytea ORDER BY chunk) FROM {SCHEMA}.projection_postings
WHERE store = %(store)s AND term > %(low)s AND left(term, %(length)s) = %(low)s GROUP BY term ORDER BY term
"""

# The columns of a `ChunkRow` (of chunk `c` and its record `r`).
_CHUNK = "c.id, c.record_id, c.ordinal, c.text"
_RECORD = ("title", "kind", "scope", "status", "access", "path", "aliases", "sources", "created_at")


def _record(alias: str) -> str:
    """The record's columns of a `ChunkRow`, read from `alias`."""
    return ", ".join(f"{alias}.{column}" for column in _RECORD)


_ROW = f"{_CHUNK}, {_record('r')}"
_JOINED = f"{_CHUNKS} AS c JOIN {_RECORDS} AS r ON r.store = c.store AND r.id = c.record_id"

# Chunk vectors as `vector_send` gives them (the candidates of `PgVectorSearch.similarities`).
VECTORS = f"""
SELECT id, vector_send(embedding) FROM {_CHUNKS}
WHERE store = %(store)s AND id = ANY(%(chunks)s::int8[]) AND embedding IS NOT NULL ORDER BY id
"""
# Sentence vectors of chunks whose rows were not read.
SENTENCES = f"""
SELECT id, sentence_vectors FROM {_CHUNKS}
WHERE id = ANY(%(chunks)s::int8[]) AND sentence_vectors IS NOT NULL AND store = %(store)s
"""


def _filters(access: bool, kinds: bool) -> str:
    """The options' filters on record `r` (`projection.filter_values` gives their values)."""
    found = "r.status = ANY(%(statuses)s::text[]) AND r.scope = ANY(%(scopes)s::text[])"
    if access:
        found += " AND r.access = ANY(%(access)s::text[])"
    if kinds:
        found += " AND r.kind = ANY(%(kinds)s::text[])"
    return found


@cache
def chunk_rows(access: bool, kinds: bool) -> str:
    """The rows of chunks `chunks` whose record passes the filters, each with its vector (as `vector_send`
    gives it) and its sentences' vectors after the `ChunkRow`'s columns."""
    return f"""
SELECT {_ROW}, vector_send(c.embedding), c.sentence_vectors FROM {_JOINED}
WHERE c.id = ANY(%(chunks)s::int8[]) AND {_filters(access, kinds)}
"""


@cache
def nearest(access: bool, kinds: bool, indexed: bool) -> str:
    """The `take` nearest chunks (`indexed`: through the HNSW index, ordered by distance alone, as it
    returns them; else exactly, ties by chunk id), the nearest of each record among them, and the rows
    of the best `records` of those whose record passes the filters, each with its sentences' vectors,
    its distance and how many chunks were found (one row of NULLs and that count when none passes).

    The records are looked up after the search, for the nearest of each record in distance order until
    `records` pass: a filter inside the search looked up the record of every chunk found (four times
    `records`, then again for the rows kept). `OFFSET 0` keeps that order's subquery as it is, the outer
    side of the join, which then stops at the `records`-th record that passes; flattened, the planner
    looked up every record and sorted after. Records pass or fail as a whole, so every record that the
    search ranks among the best `records` that pass is kept; when fewer pass, `PgVectorSearch.nearest`
    asks for more chunks."""
    order = "distance" if indexed else "distance, c.id"
    return f"""
WITH near AS (
  SELECT c.id, c.record_id, c.embedding <=> %(query)s::vector AS distance FROM {_CHUNKS} AS c
  WHERE c.store = %(store)s AND c.embedding IS NOT NULL ORDER BY {order} LIMIT %(take)s
), each AS (
  SELECT DISTINCT ON (record_id) id, record_id, distance FROM near ORDER BY record_id, distance, id
), best AS (
  SELECT each.id, each.distance, {_record("r")} FROM (SELECT * FROM each ORDER BY distance, id OFFSET 0) AS each
  JOIN {_RECORDS} AS r ON r.store = %(store)s AND r.id = each.record_id
  WHERE {_filters(access, kinds)} ORDER BY each.distance, each.id LIMIT %(records)s
)
SELECT {_CHUNK}, {_record("best")}, c.sentence_vectors, best.distance,
  counted.chunks
FROM (SELECT count(*) AS chunks FROM near) AS counted LEFT JOIN (best JOIN {_CHUNKS} AS c ON c.id = best.id) ON true
ORDER BY best.distance, best.id
"""

"""Every piece of SQL that is specific to SQLite FTS5.

The full-text table is an external-content FTS5 table over `chunks.retrieval_text`, kept in step
by triggers; an `fts5vocab` table exposes per-term row counts. Nothing newer than SQLite 3.40 is
needed (no `contentless_delete`). Another backend (PostgreSQL with tsvector, say) would replace
this module and nothing else.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Connection

FTS_TABLE = "chunks_fts"
VOCAB_TABLE = "chunks_vocab"
TOKENIZER = "unicode61 remove_diacritics 0"

_DDL = (
    f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5("
    f"retrieval_text, content='chunks', content_rowid='id', tokenize='{TOKENIZER}')",
    f"CREATE VIRTUAL TABLE {VOCAB_TABLE} USING fts5vocab({FTS_TABLE}, 'row')",
    f"CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, retrieval_text) VALUES (new.id, new.retrieval_text); END",
    f"CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, retrieval_text) VALUES ('delete', old.id, old.retrieval_text); END",
    f"CREATE TRIGGER chunks_fts_update AFTER UPDATE OF retrieval_text ON chunks BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, retrieval_text) VALUES ('delete', old.id, old.retrieval_text); "
    f"INSERT INTO {FTS_TABLE}(rowid, retrieval_text) VALUES (new.id, new.retrieval_text); END",
)
_WORD = re.compile(r"\w+")  # for str patterns: str.isalnum() characters and "_"


def create(conn: Connection) -> None:
    """Create the full-text table, its vocabulary view and the triggers that mirror `chunks` into it."""
    for statement in _DDL:
        conn.exec_driver_sql(statement)


def query_terms(query: str) -> list[str]:
    """Lowercased runs of Unicode letters, digits and `_`; everything else separates terms."""
    return [word.lower() for word in _WORD.findall(query)]


def match_expression(terms: Sequence[str], prefix_terms: Sequence[str] | None = None) -> str:
    """An FTS5 query: the phrase of all terms OR each of `prefix_terms` (default: the distinct terms)
    as a prefix.

    Every term is double-quoted, so nothing in a user's query can act as FTS5 syntax. A one-letter
    ASCII term is matched as a whole token rather than as a prefix, which would match most of the
    index.
    """
    unique = list(dict.fromkeys(terms if prefix_terms is None else prefix_terms))
    parts = [_quoted(term) + ("" if len(term) == 1 and term.isascii() else "*") for term in unique]
    if len(terms) > 1:
        parts.insert(0, _quoted(" ".join(terms)))
    return " OR ".join(parts)


def _quoted(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def row_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])


def term_rows(conn: sqlite3.Connection, term: str) -> int:
    """How many chunks contain the token `term`."""
    row = conn.execute(f"SELECT doc FROM {VOCAB_TABLE} WHERE term = ?", (term,)).fetchone()
    return 0 if row is None else int(row[0])


@dataclass(frozen=True)
class Filters:
    """Record filters for `ranked_chunks`; None means "any"."""

    statuses: Sequence[str]
    scopes: Sequence[str]
    access: Sequence[str] | None = None
    kinds: Sequence[str] | None = None


def ranked_chunks(
    conn: sqlite3.Connection, match: str, limit: int, filters: Filters | None = None
) -> list[tuple[int, float]]:
    """`(chunk id, bm25)` of the best matching chunks, best first (ties by chunk id).

    bm25 is negative; more negative is better. Without `filters` only the full-text index is
    read (fast); with them, every match is joined to its record and filtered before the limit.
    """
    if filters is None:
        sql = (f"SELECT rowid, bm25({FTS_TABLE}) AS score FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ? "
               "ORDER BY score, rowid LIMIT ?")  # fmt: skip
        return [(int(row[0]), float(row[1])) for row in conn.execute(sql, (match, limit))]
    conditions: list[tuple[str, Sequence[str]]] = [("status", filters.statuses), ("scope", filters.scopes)]
    conditions += [(name, values) for name, values in (("access", filters.access), ("kind", filters.kinds))
                   if values is not None]  # fmt: skip
    where = " AND ".join(f"r.{name} IN ({', '.join('?' * len(values))})" for name, values in conditions)
    sql = (
        f"SELECT c.id, bm25({FTS_TABLE}) AS score FROM {FTS_TABLE} "
        f"JOIN chunks AS c ON c.id = {FTS_TABLE}.rowid JOIN records AS r ON r.id = c.record_id "
        f"WHERE {FTS_TABLE} MATCH ? AND {where} ORDER BY score, c.id LIMIT ?"
    )
    params = (match, *(value for _name, values in conditions for value in values), limit)
    return [(int(row[0]), float(row[1])) for row in conn.execute(sql, params)]


def integrity_problem(conn: sqlite3.Connection) -> str | None:
    """None when the full-text index matches its content table, else a short reason."""
    try:
        conn.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rank) VALUES ('integrity-check', 1)")
    except sqlite3.Error as exc:
        return type(exc).__name__
    return None

"""Re-projecting a record keeps the chunk rows that did not change.

A chunk row is identified by its content: with the record's title, aliases, tags and file name
unchanged (they make every chunk's retrieval prefix), a chunk's heading and the sha256 of its
embedding text (`title \\n heading \\n text`, the title and heading on lines of their own) fix its
text, embedding text and retrieval text; its word and model-token counts are compared too. A
stored row with the same values is kept with its id, so its postings and its vector rows stay as
they are; only its ordinal moves when text before it was added or removed. The other stored rows
are deleted and the new ones inserted, which is all the postings (`postings.apply_changes`) and
the vector matrix see.
Editing one line of a 5 MB log thus re-indexes a chunk or two instead of 4,000.

A chunk's retrieval text is its retrieval prefix followed by its text, and is stored without the
text (`stored`): only the prefix, unless the text is empty or the prefix itself ends with it. A
stored retrieval text that ends with the chunk's text is whole (rows written before, and those
exceptions), any other is the prefix, and `retrieval_text` reads either back whole, so a large
record's text is stored once and old projections need no rebuild.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# Columns of a chunk row as `index.sync.record_chunks` makes them
HEADING, TOKENS, WORDS, EMBED_HASH, ORDINAL = 2, 6, 7, 8, 1
INSERT = (
    "INSERT INTO chunks(record_id, ordinal, heading, text, embed_text, retrieval_text, token_count, word_count, "
    "embed_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

TEXT, RETRIEVAL_TEXT = 3, 5


def stored(row: Row) -> Row:
    """A chunk row as it is stored: its retrieval text without the chunk text (see the module)."""
    text, retrieval = row[TEXT], row[RETRIEVAL_TEXT]
    prefix = retrieval[: len(retrieval) - len(text)]
    if not text or not retrieval.endswith(text) or prefix.endswith(text):
        return row
    return (*row[:RETRIEVAL_TEXT], prefix, *row[RETRIEVAL_TEXT + 1 :])


def retrieval_text(table: str) -> str:
    """SQL reading the whole retrieval text of a row of `table` (a name or alias of `chunks`, or `old`
    in a trigger) from its stored form: the stored value when it ends with the chunk text (compared as
    UTF-8 bytes), else the stored prefix followed by the text."""
    stored_text, text = f"{table}.retrieval_text", f"{table}.text"
    return (f"CASE WHEN substr(CAST({stored_text} AS BLOB), -length(CAST({text} AS BLOB))) = CAST({text} AS BLOB) "
            f"THEN {stored_text} ELSE {stored_text} || {text} END")  # fmt: skip


def insert(conn: sqlite3.Connection, rows: Sequence[Row]) -> None:
    """Insert new chunk rows (as `index.sync.record_chunks` makes them) in their stored form."""
    conn.executemany(INSERT, map(stored, rows))


Key = tuple[str | None, str, int, int]  # heading, embedding text's sha256, model tokens, words
Row = tuple[Any, ...]  # record id, ordinal, heading, text, embedding and retrieval text, tokens, words, hash


@dataclass
class ChunkChanges:
    """What turns a record's stored chunk rows into its new ones."""

    inserted: list[Row] = field(default_factory=list)  # new rows, as `record_chunks` makes them
    deleted: list[int] = field(default_factory=list)  # ids of stored rows that no new row matches
    moved: list[tuple[int, int]] = field(default_factory=list)  # (id, new ordinal) of kept rows
    kept: int = 0  # stored rows kept, moved or not


def match(stored: Sequence[tuple[int, int, str | None, str, int, int]], rows: Sequence[Row]) -> ChunkChanges:
    """Pair each new row with a stored one of the same content, in order; `stored`: (id, ordinal,
    heading, embed hash, model tokens, words) of the record's rows now."""
    free: dict[Key, deque[tuple[int, int]]] = {}
    for chunk_id, ordinal, heading, embed_hash, tokens, words in sorted(stored, key=lambda row: row[1]):
        free.setdefault((heading, embed_hash, tokens, words), deque()).append((chunk_id, ordinal))
    changes = ChunkChanges()
    for row in rows:
        same = free.get((row[HEADING], row[EMBED_HASH], row[TOKENS], row[WORDS]))
        if not same:
            changes.inserted.append(row)
            continue
        chunk_id, ordinal = same.popleft()
        changes.kept += 1
        if ordinal != row[ORDINAL]:
            changes.moved.append((chunk_id, row[ORDINAL]))
    changes.deleted = [chunk_id for left in free.values() for chunk_id, _ in left]
    return changes


def replace(conn: sqlite3.Connection, record_id: str, rows: Sequence[Row]) -> ChunkChanges:
    """Make `rows` the chunks of `record_id`, keeping the stored rows that match one (see the module)."""
    stored = conn.execute(
        "SELECT id, ordinal, heading, embed_hash, token_count, word_count FROM chunks WHERE record_id = ?",
        (record_id,),
    ).fetchall()
    changes = match(stored, rows)
    conn.executemany("DELETE FROM chunks WHERE id = ?", [(chunk_id,) for chunk_id in changes.deleted])
    # Through negative ordinals first: (record id, ordinal) is unique at every step.
    conn.executemany("UPDATE chunks SET ordinal = ? WHERE id = ?",
                     [(-1 - ordinal, chunk_id) for chunk_id, ordinal in changes.moved])  # fmt: skip
    conn.executemany("UPDATE chunks SET ordinal = ? WHERE id = ?",
                     [(ordinal, chunk_id) for chunk_id, ordinal in changes.moved])  # fmt: skip
    insert(conn, changes.inserted)
    return changes

"""The lexical index: BM25 postings of every chunk's retrieval text, kept in the projection.

Terms (`terms`) are the runs of Unicode letters, digits and `_` of a text, lowercased, each
reduced to its stem by the Snowball English stemmer ("deploying", "deployed" and "deploys" are all
"deploy"); queries are split and stemmed the same way, so nothing in a query is syntax. Words of
other scripts pass through the stemmer unchanged.

Fields: the first five lines of a retrieval text are the record's title, the chunk's heading path,
the aliases, the tags and the file name (`index.sync.retrieval_prefix`), the rest is the chunk
text. A term counts `FIELD_WEIGHTS` times per occurrence in each field (a simplified BM25F: the
weighted counts and the weighted length of a chunk stand for its term frequencies and length).

The `postings` table holds one row per term: every chunk containing it, as a packed little-endian
array of (chunk id, weighted occurrences of the term, weighted terms in the chunk), sorted by chunk
id. Ranking a query reads one row per query term (a range of rows for a word that is only a
prefix of indexed terms) and scores the chunks with NumPy.

Maintenance is transactional, whatever writer changes `chunks`: `apply_changes` brings the postings
up to date before the writer commits. New chunks are found by their ids: chunk ids only grow
(AUTOINCREMENT), so every chunk above the highest id already folded (`THROUGH` in the projection's
metadata) is new, read by one range scan, with no per-row work while a large record's 4,000 rows are
inserted. Triggers log every updated and deleted chunk in `lexical_changes`, with its old text (after
a delete nothing else holds it). Chunk count and total weighted length of all chunks, which
BM25 needs, are kept in the projection's metadata. Removing chunks touches every term they had: those
terms and the chunks' lengths are found by splitting their old texts again, or, when the postings are
smaller than those texts (a large record forgotten), by reading every postings row instead (`_swept`).

Why not FTS5's `bm25()`: it costs 2–3 µs per matching row, and typical queries match a third or
more of all chunks (on the scale corpus and on SciFact alike), so a store of 10,000 records spent
15–30 ms per query in it; the packed postings answer in about a millisecond.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, KeysView, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import chain, compress, count
from typing import TYPE_CHECKING, Any, Protocol

from . import kept_chunks
from .projection import get_setting, set_settings

if TYPE_CHECKING:
    import numpy as np
    from sqlalchemy import Connection

K1 = 1.2  # BM25 term-frequency saturation
B = 0.75  # BM25 length normalization
IDF_FLOOR = 1e-6  # a term in half of the chunks or more still counts, a little
MAX_COUNT = 0xFFFF  # occurrences and lengths are stored as 16-bit counts (saturating)
STATS = "lexical_stats"  # metadata key: JSON {"chunks": n, "terms": total length}
THROUGH = "lexical_through"  # metadata key: the highest chunk id the postings hold (0 when absent)
_BATCH = 500  # terms per statement
_WORD = re.compile(r"\w+")  # for str patterns: str.isalnum() characters and "_"
_ASCII_SEPARATORS = str.maketrans({c: " " for c in map(chr, range(128)) if not (c.isalnum() or c == "_")})
FIELD_WEIGHTS = (2, 1, 2, 1, 1, 1)  # title, heading path, aliases, tags, file name, chunk text
_TEXT_WEIGHT = FIELD_WEIGHTS[-1]
# Words left out of a query while it has other words: the English stop set of Lucene's and
# Elasticsearch's standard analyzers (articles, prepositions, conjunctions, forms of "be"), whose
# BM25 weight is noise. Pronouns, auxiliaries and question words stay: in a store of conversations
# "I", "my" and "you" tell who said something, and "can you suggest" finds an earlier request.
STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split()
)

_OLD_TEXT = kept_chunks.retrieval_text("old")
_INSERT_TRIGGER = "chunks_lexical_insert"  # logged each inserted chunk until layout 9
_TRIGGERS = {
    "chunks_lexical_delete": "CREATE TRIGGER chunks_lexical_delete AFTER DELETE ON chunks BEGIN "
    f"INSERT INTO lexical_changes(chunk, added, text) VALUES (old.id, 0, {_OLD_TEXT}); END",
    "chunks_lexical_update": "CREATE TRIGGER chunks_lexical_update AFTER UPDATE OF text, retrieval_text ON chunks "
    f"BEGIN INSERT INTO lexical_changes(chunk, added, text) VALUES (old.id, 0, {_OLD_TEXT}); "
    "INSERT INTO lexical_changes(chunk, added, text) VALUES (new.id, 1, NULL); END",
}


@cache
def _stemmer() -> Any:
    import Stemmer  # PyStemmer: Snowball's C stemmers; imported only where terms are made

    return Stemmer.Stemmer("english")


def words(text: str) -> list[str]:
    """Lowercased runs of Unicode letters, digits and `_`; everything else separates words."""
    if text.isascii():  # the same runs, found by turning every other character into a space
        return text.lower().translate(_ASCII_SEPARATORS).split()
    found = _WORD.findall(text)
    # Lowered all at once: a line break is in no word and comes of no lowercasing, so the split gives
    # each word lowered on its own (a final sigma too: case context does not cross a line break).
    return "\n".join(found).lower().split("\n") if found else []


def stems(found: list[str], known: dict[str, str] | None = None) -> list[str]:
    """Each word's stem, in order; each distinct word is stemmed once (`known` carries the stems of
    words seen before and gains the new ones)."""
    known = {} if known is None else known
    new = list(set(found).difference(known))
    if new:
        known.update(zip(new, _stemmer().stemWords(new), strict=True))
    return list(map(known.__getitem__, found))


def terms(text: str) -> list[str]:
    """The stemmed words of a text, in order: what the postings hold and what a query looks up."""
    return stems(words(text))


def query_terms(query: str) -> list[str]:
    """The distinct terms of a query, without stopwords unless it has nothing else."""
    found = words(query)
    content = [word for word in found if word not in STOPWORDS] or found
    return list(dict.fromkeys(stems(content)))


Tally = tuple[Counter[str], int]  # weighted count of each term, weighted length


def weighted_terms(
    retrieval_text: str, known: dict[str, str] | None = None, prefixes: dict[str, Tally] | None = None
) -> Tally:
    """A retrieval text's weighted count of each term, and its weighted length (`known`: as `stems`;
    `prefixes` carries the counts of the fields before the chunk text, which the chunks of one record
    share, and gains new ones)."""
    known = {} if known is None else known
    fields = retrieval_text.split("\n", len(FIELD_WEIGHTS) - 1)
    text = fields.pop() if len(fields) == len(FIELD_WEIGHTS) else None
    prefix = "\n".join(fields)
    cached = None if prefixes is None else prefixes.get(prefix)
    if cached is None:
        cached = _field_terms(fields, known)
        if prefixes is not None:
            prefixes[prefix] = cached
    counts, length = cached[0].copy(), cached[1]
    if text is not None:
        found = stems(words(text), known)
        length += _TEXT_WEIGHT * len(found)
        for _ in range(_TEXT_WEIGHT):
            counts.update(found)
    return counts, length


def _field_terms(fields: list[str], known: dict[str, str]) -> Tally:
    """Weighted counts and length of the fields before the chunk text."""
    counts: Counter[str] = Counter()
    length = 0
    for field, weight in zip(fields, FIELD_WEIGHTS, strict=False):
        found = stems(words(field), known)
        length += weight * len(found)
        for _ in range(weight):  # each occurrence counts `weight` times
            counts.update(found)
    return counts, length


def create(conn: Connection) -> None:
    """The triggers that log changes of `chunks` (the tables are part of the projection's metadata)."""
    for statement in _TRIGGERS.values():
        conn.exec_driver_sql(statement)


def renew_triggers(conn: sqlite3.Connection) -> None:
    """Make the change log of a projection made before today's work as today's, in the caller's
    transaction: the triggers that logged the stored retrieval text as it was (not read back whole) are
    replaced, and the one that logged each inserted chunk is dropped, every chunk there is now counted
    as folded (`THROUGH`; inserts it logged and no writer applied yet stay in the log and are applied)."""
    stored = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall())
    for name, statement in _TRIGGERS.items():
        if name in stored and stored[name] != statement:
            conn.execute(f"DROP TRIGGER {name}")
            conn.execute(statement)
    if _INSERT_TRIGGER in stored:
        conn.execute(f"DROP TRIGGER {_INSERT_TRIGGER}")
        set_settings(conn, {THROUGH: str(_last_chunk(conn))})


def _last_chunk(conn: sqlite3.Connection) -> int:
    """The highest chunk id there is (0 without chunks); every chunk inserted later has a higher one."""
    return int(conn.execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()[0])


@cache
def _entry() -> np.dtype:
    import numpy as np

    return np.dtype([("chunk", "<i4"), ("count", "<u2"), ("length", "<u2")])


@dataclass(frozen=True)
class Stats:
    chunks: int
    terms: int  # total weighted length of all chunks

    @classmethod
    def of(cls, settings: Mapping[str, str]) -> Stats:
        stored = json.loads(settings.get(STATS, '{"chunks": 0, "terms": 0}'))
        return cls(int(stored["chunks"]), int(stored["terms"]))

    @property
    def average_length(self) -> float:
        return self.terms / self.chunks if self.chunks else 1.0


# ---- maintenance ---------------------------------------------------------------------------


def apply_changes(conn: sqlite3.Connection) -> None:
    """Fold the chunks inserted since the last fold (ids above `THROUGH`) and the logged changes into the
    postings and the statistics, and clear the log.

    Runs inside the writer's transaction. A chunk inserted and deleted since the last fold never
    reaches the postings.
    """
    settings = dict(conn.execute("SELECT key, value FROM metadata WHERE key IN (?, ?)", (STATS, THROUGH)).fetchall())
    through, last = int(settings.get(THROUGH, 0)), _last_chunk(conn)
    updated: set[int] = set()
    removed: dict[int, str] = {}
    for chunk, was_added, old_text in conn.execute("SELECT chunk, added, text FROM lexical_changes ORDER BY seq"):
        if chunk > through:
            continue  # new since the last fold: read below if it is still there, never in the postings before
        if was_added:
            updated.add(chunk)
        elif chunk in updated:
            updated.discard(chunk)
        else:
            removed[chunk] = old_text
    if updated or removed or last > through:
        stats = Stats.of(settings)
        dropped, removed_length = _swept(conn, removed) or _terms_of(removed.values())
        total = stats.terms - removed_length
        new = _Accumulator()
        total += new.add_all(chain(_updated_texts(conn, updated), _new_texts(conn, through)))
        _merge(conn, new, dropped, removed.keys())
        chunks = int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
        set_settings(conn, {STATS: json.dumps({"chunks": chunks, "terms": total})})
    if last > through:
        set_settings(conn, {THROUGH: str(last)})
    conn.execute("DELETE FROM lexical_changes")


_WHOLE_TEXT = kept_chunks.retrieval_text("c")


def _updated_texts(conn: sqlite3.Connection, updated: set[int]) -> Iterator[tuple[int, str]]:
    """(id, retrieval text) of each chunk in `updated` (logged by the update trigger), once, in id order."""
    if not updated:
        return
    for chunk, text in conn.execute(
        f"SELECT c.id, {_WHOLE_TEXT} FROM lexical_changes AS l JOIN chunks AS c "
        "ON c.id = l.chunk WHERE l.added = 1 ORDER BY c.id"
    ):
        if chunk in updated:
            updated.discard(chunk)
            yield chunk, text


def _new_texts(conn: sqlite3.Connection, through: int) -> Iterator[tuple[int, str]]:
    """(id, retrieval text) of each chunk above `through`, in id order (after every updated one)."""
    yield from conn.execute(f"SELECT c.id, {_WHOLE_TEXT} FROM chunks AS c WHERE c.id > ? ORDER BY c.id", (through,))


# What finding the removed chunks' terms costs, in nanoseconds: splitting and stemming their texts, per
# character (22 on a log, 42 on prose), against reading every postings row and looking for them there,
# per row (3,400) and per byte (about 1); measured on a loaded 2-core host, rounded against the sweep:
# only the ratios matter. Below `SWEEP_FROM` characters the texts are always split (milliseconds).
SPLIT_NS_PER_CHAR = 20
SWEEP_NS_PER_ROW, SWEEP_NS_PER_BYTE = 4000, 1
SWEEP_FROM = 1_000_000


def _swept(conn: sqlite3.Connection, removed: Mapping[int, str]) -> tuple[set[str], int] | None:
    """The terms whose postings hold a removed chunk and the removed chunks' total weighted length, read
    from the postings instead of from the removed texts, when that costs less (a large record forgotten
    from a store whose postings are small beside it); None when it does not, or when a removed chunk's
    length is saturated in the postings (its text says it exactly)."""
    import numpy as np

    characters = sum(map(len, removed.values()))
    if characters < SWEEP_FROM:
        return None
    rows, size = conn.execute("SELECT count(*), coalesce(sum(length(entries)), 0) FROM postings").fetchone()
    if rows * SWEEP_NS_PER_ROW + size * SWEEP_NS_PER_BYTE >= characters * SPLIT_NS_PER_CHAR:
        return None
    is_gone = _chunk_mask(removed)
    terms: set[str] = set()
    lengths: dict[int, int] = {}
    for term, stored in conn.execute("SELECT term, entries FROM postings"):
        entries = np.frombuffer(stored, dtype=_entry())
        hit = entries[_held(entries, is_gone)]
        if hit.size:
            if hit["length"].max() >= MAX_COUNT:
                return None
            terms.add(term)
            lengths.update(zip(hit["chunk"].tolist(), hit["length"].tolist(), strict=True))
    return terms, sum(lengths.values())  # a chunk in no postings has no terms: its length is 0


def _terms_of(texts: Iterable[str]) -> tuple[set[str], int]:
    """Every term of these retrieval texts, and their total weighted length: what removing their
    chunks takes away. The chunk texts are split as one text (no word crosses the line breaks that
    join them), the shared fields before them once per distinct value."""
    known: dict[str, str] = {}
    prefixes: dict[str, Tally] = {}
    found: set[str] = set()
    length = 0
    bodies = []
    for text in texts:
        fields = text.split("\n", len(FIELD_WEIGHTS) - 1)
        if len(fields) == len(FIELD_WEIGHTS):
            bodies.append(fields.pop())
        prefix = "\n".join(fields)
        if prefix not in prefixes:
            prefixes[prefix] = _field_terms(fields, known)
            found.update(prefixes[prefix][0])
        length += prefixes[prefix][1]
    body_words = words("\n".join(bodies))
    found.update(stems(list(set(body_words)), known))
    return found, length + _TEXT_WEIGHT * len(body_words)


class _Accumulator:
    """Postings of new chunks, added in increasing chunk order (`add_all`).

    Chunks come in batches of about `BATCH_CHARS` characters; each batch is counted at once: the
    words of all its chunk texts (an ASCII batch split in one pass over its bytes), each distinct
    word numbered and stemmed once, and every (chunk, term) count summed with NumPy, the shared
    fields before the chunk texts counted once per distinct value. Every `FOLD` entries the gathered
    ones are grouped by term in one sort (a whole store's fit in memory, at about the packed size);
    `packed` joins a term's groups."""

    FOLD = 1 << 20  # entries gathered before they are grouped
    # Characters of retrieval text counted at once: a batch's arrays (a few bytes per character) stay
    # within a few megabytes, reused by the next batch instead of mapped and faulted in anew.
    BATCH_CHARS = 1 << 19

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}  # term → its number
        self._groups: list[list[np.ndarray]] = []  # per term number: its packed entries, fold by fold
        self._gathered: list[tuple[np.ndarray, ...]] = []  # (chunk, term number, count, length) per batch
        self._gathered_size = 0
        self._stems: dict[str, str] = {}
        self._prefixes: dict[str, Tally] = {}

    def add_all(self, chunks: Iterable[tuple[int, str]]) -> int:
        """Add chunks (id, retrieval text) in increasing id order; returns their total weighted length."""
        total = 0
        batch: list[tuple[int, str]] = []
        size = 0
        for chunk in chunks:
            batch.append(chunk)
            size += len(chunk[1])
            if size >= self.BATCH_CHARS:
                total += self._add_batch(batch)
                batch, size = [], 0
        return total + (self._add_batch(batch) if batch else 0)

    def _add_batch(self, batch: list[tuple[int, str]]) -> int:
        import numpy as np

        prefixes: dict[str, int] = {}  # the distinct fields before the chunk texts → their number
        prefix_of: list[int] = []
        bodies: list[str] = []
        for _, text in batch:
            fields = text.split("\n", len(FIELD_WEIGHTS) - 1)
            bodies.append(fields.pop() if len(fields) == len(FIELD_WEIGHTS) else "")
            prefix_of.append(prefixes.setdefault("\n".join(fields), len(prefixes)))
        distinct, word_numbers, sizes = _numbered_words(bodies)
        local: dict[str, int] = {}  # the batch's terms → their number in the batch
        word_terms = np.array([local.setdefault(term, len(local)) for term in stems(distinct, self._stems)],
                              dtype=np.int64)  # fmt: skip
        tallies = [self._prefix_tally(prefix) for prefix in prefixes]
        prefix_terms = [[local.setdefault(term, len(local)) for term in counts] for counts, _ in tallies]
        # Each (row in the batch, term) as one key, row * terms + term; the chunk texts' words weigh
        # `_TEXT_WEIGHT` each, and each row's fields count as their tally says.
        rows, terms = np.arange(len(batch), dtype=np.int64), len(local)
        keys = [np.repeat(rows, sizes) * terms + word_terms[word_numbers]]
        weights = [np.full(word_numbers.size, _TEXT_WEIGHT, dtype=np.int64)]
        row_prefix = np.array(prefix_of, dtype=np.int64)
        for number, ((counts, _), numbers) in enumerate(zip(tallies, prefix_terms, strict=True)):
            held = rows[row_prefix == number]
            keys.append((held[:, None] * terms + np.array(numbers, dtype=np.int64)).ravel())
            weights.append(np.tile(np.array(list(counts.values()), dtype=np.int64), held.size))
        pairs, sums = _summed(np.concatenate(keys), np.concatenate(weights), len(batch) * terms)
        lengths = np.array([length for _, length in tallies], dtype=np.int64)[row_prefix] + _TEXT_WEIGHT * sizes
        numbers_of = np.array([self._ids.setdefault(term, len(self._ids)) for term in local], dtype=np.int64)
        chunk_ids = np.array([chunk for chunk, _ in batch], dtype=np.int64)
        row, term = np.divmod(pairs, max(terms, 1))
        if pairs.size:
            self._gathered.append((chunk_ids[row], numbers_of[term], sums, lengths[row]))
            self._gathered_size += pairs.size
        if self._gathered_size >= self.FOLD:
            self._fold()
        return int(lengths.sum())

    def _prefix_tally(self, prefix: str) -> Tally:
        """The weighted counts and length of the fields before a chunk text, counted once per value."""
        if prefix not in self._prefixes:
            self._prefixes[prefix] = _field_terms(prefix.split("\n"), self._stems)
        return self._prefixes[prefix]

    @property
    def terms(self) -> KeysView[str]:
        """Every term with entries."""
        self._fold()
        return self._ids.keys()

    def packed(self, term: str) -> np.ndarray:
        """The term's entries, by chunk id."""
        import numpy as np

        self._fold()
        number = self._ids.get(term)
        groups = [] if number is None else self._groups[number]
        return groups[0] if len(groups) == 1 else np.concatenate(groups) if groups else np.empty(0, dtype=_entry())

    def _fold(self) -> None:
        """Group the gathered entries by term (chunk order kept within each) and start gathering anew."""
        import numpy as np

        if not self._gathered:
            return
        chunks, numbers, counts, lengths = (np.concatenate(column) for column in zip(*self._gathered, strict=True))
        self._gathered, self._gathered_size = [], 0
        order = np.argsort(numbers, kind="stable")
        table = np.empty(order.size, dtype=_entry())
        table["chunk"] = chunks[order]
        table["count"] = np.minimum(counts, MAX_COUNT)[order]
        table["length"] = np.minimum(lengths, MAX_COUNT)[order]
        numbers = numbers[order]
        del order, chunks, counts, lengths
        self._groups.extend([] for _ in range(len(self._ids) - len(self._groups)))
        bounds = np.flatnonzero(np.diff(numbers)) + 1
        for first, last in zip([0, *bounds.tolist()], [*bounds.tolist(), numbers.size], strict=True):
            self._groups[int(numbers[first])].append(table[first:last])


# Every ASCII byte turned into itself lowercased when it is a letter, digit or `_`, else into a space
_ASCII_WORD_BYTES = bytes(
    (code | 0x20 if chr(code).isupper() else code) if code < 128 and (chr(code).isalnum() or code == 0x5F) else 0x20
    for code in range(256)
)
_KEY_BYTES = 8  # an ASCII word of at most this many bytes is numbered by its bytes read as one 64-bit key
# Characters of a batch from which its ASCII words are numbered by key: below, numbering each word by a
# dictionary costs less than making the keys' arrays (the two meet at about 16,000 characters).
_KEYED_FROM = 1 << 14


def _numbered_words(bodies: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The words (`words`) of every body, one body after another, as numbers into a list of the distinct
    words, and how many words each body has. The ASCII bodies are counted together as bytes
    (`_ascii_words`), the others one by one (`_split_words`), and their words put back in order; a
    batch of fewer than `_KEYED_FROM` characters with any other body is split body by body whole."""
    import numpy as np

    is_ascii = list(map(str.isascii, bodies))
    if all(is_ascii):
        return _ascii_words(bodies)
    if not any(is_ascii) or sum(map(len, bodies)) < _KEYED_FROM:
        return _split_words(bodies)
    plain = np.array(is_ascii)
    distinct, ascii_numbers, ascii_sizes = _ascii_words(list(compress(bodies, plain)))
    other, other_numbers, other_sizes = _split_words(list(compress(bodies, ~plain)))
    position = {word: number for number, word in enumerate(distinct)}
    renumbered = np.array([position.setdefault(word, len(position)) for word in other], dtype=np.int64)
    sizes = np.empty(len(bodies), dtype=np.int64)
    sizes[plain], sizes[~plain] = ascii_sizes, other_sizes
    body_of = np.concatenate(
        [np.repeat(np.flatnonzero(plain), ascii_sizes), np.repeat(np.flatnonzero(~plain), other_sizes)]
    )
    numbers = np.concatenate([ascii_numbers, renumbered[other_numbers]])[np.argsort(body_of, kind="stable")]
    return list(position), numbers, sizes


def _split_words(bodies: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """`_numbered_words` of any bodies, split one by one (`words`), each distinct word numbered by a dictionary."""
    import numpy as np

    split = [words(body) for body in bodies]
    distinct, numbers = _by_dictionary(list(chain.from_iterable(split)))
    return distinct, numbers, np.fromiter(map(len, split), dtype=np.int64, count=len(split))


def _by_dictionary(found: list[str] | list[bytes], first: int = 0) -> tuple[list[str], np.ndarray]:
    """The distinct words of `found` (ASCII bytes or text), in order of first occurrence, and each word's
    number among them, counted from `first`."""
    import numpy as np

    numbered: defaultdict[str | bytes, int] = defaultdict(count(first).__next__)  # each distinct word → its number
    numbers = np.fromiter(map(numbered.__getitem__, found), dtype=np.int64, count=len(found))
    return [word if isinstance(word, str) else word.decode("ascii") for word in numbered], numbers


def _ascii_words(bodies: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """`_numbered_words` of ASCII bodies, joined by line breaks (no word crosses one), lowercased and cut
    at once as bytes. From `_KEYED_FROM` characters on, each word of up to `_KEY_BYTES` bytes (nearly all
    of them) is read as a 64-bit key, its bytes zero-padded, without becoming an object: the distinct
    keys are the distinct short words; longer words are split out of a copy of the bytes in which the
    short ones are blanked. A smaller batch's words are split and numbered by a dictionary."""
    import numpy as np

    folded = "\n".join(bodies).encode("ascii").translate(_ASCII_WORD_BYTES)
    is_word = np.frombuffer(folded, dtype=np.uint8) != 0x20
    begins = np.flatnonzero(is_word & np.diff(is_word, prepend=False))  # where each word begins
    ends = np.cumsum(np.fromiter(map(len, bodies), dtype=np.int64, count=len(bodies)) + 1) - 1
    sizes = np.diff(np.searchsorted(begins, ends), prepend=0)
    if len(folded) < _KEYED_FROM:
        distinct, numbers = _by_dictionary(folded.split())
        return distinct, numbers, sizes
    lengths = np.flatnonzero(is_word & np.diff(is_word, append=False)) + 1 - begins  # from the last byte of each
    short = lengths <= _KEY_BYTES
    # At each byte, the little-endian 64-bit number of the 8 bytes from it on; a word's key keeps its own.
    at = np.ndarray((len(folded),), dtype="<u8", buffer=folded + bytes(_KEY_BYTES - 1), strides=(1,))
    keys = at[begins[short]] & _low_bytes()[lengths[short]]
    vocabulary = np.unique(keys)  # the distinct keys (hashed), then a search: half the time of `return_inverse`
    short_numbers = np.searchsorted(vocabulary, keys)
    distinct = [word.decode("ascii") for word in vocabulary.astype("<u8").view(f"S{_KEY_BYTES}").tolist()]
    numbers = np.empty(begins.size, dtype=np.int64)
    numbers[short] = short_numbers.ravel()
    if not short.all():  # the long words, in order: the batch with every short word blanked, split
        edge = np.zeros(len(folded) + 1, dtype=np.int8)  # +1 where a short word begins, -1 after it
        edge[begins[short]] = 1
        edge[begins[short] + lengths[short]] = -1  # a separator: no word begins there
        copy = np.frombuffer(folded, dtype=np.uint8).copy()
        copy[np.cumsum(edge[:-1], dtype=np.int8) > 0] = 0x20
        long_words, numbers[~short] = _by_dictionary(copy.tobytes().split(), len(distinct))
        distinct += long_words
    return distinct, numbers, sizes


@cache
def _low_bytes() -> np.ndarray:
    """By length up to `_KEY_BYTES`, the mask of that many low bytes of a 64-bit key."""
    import numpy as np

    return np.array([(1 << 8 * length) - 1 for length in range(_KEY_BYTES + 1)], dtype=np.uint64)


def _summed(keys: np.ndarray, weights: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct `keys` (each below `bound`), ascending, and the sum of the `weights` of each."""
    import numpy as np

    if bound <= 4 * keys.size + (1 << 20):  # dense enough to count by key directly
        dense = np.bincount(keys, weights=weights, minlength=bound)
        distinct = np.flatnonzero(dense)
        return distinct, dense[distinct].astype(np.int64)
    distinct, inverse = np.unique(keys, return_inverse=True)
    return distinct, np.bincount(inverse, weights=weights, minlength=distinct.size).astype(np.int64)


def _merge(conn: sqlite3.Connection, new: _Accumulator, dropped: set[str], removed: Iterable[int]) -> None:
    """Write the postings of every term touched: without the `removed` chunks in the `dropped` terms
    (every term those chunks had), with the `new` entries."""
    import numpy as np

    is_gone = _chunk_mask(removed)
    touched = sorted(new.terms | dropped)
    for batch in _batches(touched):
        stored = dict(conn.execute(
            f"SELECT term, entries FROM postings WHERE term IN ({', '.join('?' * len(batch))})", batch))  # fmt: skip
        writes, deletes = [], []
        for term in batch:
            entries = np.frombuffer(stored.get(term, b""), dtype=_entry())
            if term in dropped:
                entries = entries[~_held(entries, is_gone)]
            if term in new.terms:
                entries = np.concatenate([entries, new.packed(term)])
                entries = entries[np.argsort(entries["chunk"], kind="stable")]
            if entries.size:
                writes.append((term, entries.tobytes()))
            else:
                deletes.append((term,))
        conn.executemany(
            "INSERT INTO postings(term, entries) VALUES (?, ?) "
            "ON CONFLICT(term) DO UPDATE SET entries = excluded.entries",
            writes,
        )
        conn.executemany("DELETE FROM postings WHERE term = ?", deletes)


def _chunk_mask(chunks: Iterable[int]) -> np.ndarray:
    """By chunk id, True for `chunks`; one slot more than the largest, which stays False."""
    import numpy as np

    ids = np.fromiter(chunks, dtype=np.int64)
    mask = np.zeros(int(ids.max(initial=-1)) + 2, dtype=bool)
    mask[ids] = True
    return mask


def _held(entries: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """For each entry, whether `mask` (`_chunk_mask`) holds its chunk."""
    import numpy as np

    held: np.ndarray = mask[np.minimum(entries["chunk"], mask.size - 1)]
    return held


def problem(conn: sqlite3.Connection) -> str | None:
    """None when the postings and statistics are exactly those of the chunks, else a short reason."""
    through = int(get_setting(conn, THROUGH) or 0)
    if conn.execute("SELECT count(*) FROM lexical_changes").fetchone()[0] or _last_chunk(conn) > through:
        return "unapplied changes"
    expected = _Accumulator()
    total = expected.add_all(conn.execute(f"SELECT id, {kept_chunks.retrieval_text('chunks')} FROM chunks ORDER BY id"))
    chunks = int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
    settings = dict(conn.execute("SELECT key, value FROM metadata WHERE key = ?", (STATS,)).fetchall())
    if Stats.of(settings) != Stats(chunks, total):
        return "statistics differ"
    stored = 0
    for term, entries in conn.execute("SELECT term, entries FROM postings"):
        stored += 1
        if term not in expected.terms or expected.packed(term).tobytes() != entries:
            return "postings differ"
    return None if stored == len(expected.terms) else "postings differ"


def _batches(items: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(items), _BATCH):
        yield items[start : start + _BATCH]


# ---- ranking -------------------------------------------------------------------------------


class TermLookup(Protocol):
    """Where a projection keeps its postings, as ranking reads them: packed entries (`entry_dtype`)."""

    def own(self, terms: Sequence[str]) -> Sequence[bytes | int | None]:
        """The entries of exactly each of `terms` (distinct), None for one that is no term of the index.
        A lookup that knows how many chunks each term is in may give that number instead of the entries of
        a term in at least half of the chunks, but only when another of `terms` surely matches fewer
        than half of them (then `rank` leaves the term out: its entries are never needed)."""

    def prefixed(self, term: str) -> list[bytes]:
        """The entries of each indexed term that `term` is a proper prefix of."""


class SqliteTerms:
    """The postings table of a SQLite projection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def own(self, terms: Sequence[str]) -> list[bytes | None]:
        found = [self.conn.execute("SELECT entries FROM postings WHERE term = ?", (term,)).fetchone() for term in terms]
        return [None if row is None else row[0] for row in found]

    def prefixed(self, term: str) -> list[bytes]:
        conn = self.conn
        if ord(term[-1]) < 0x10FFFF:
            after = term[:-1] + chr(ord(term[-1]) + 1)
            rows = conn.execute("SELECT entries FROM postings WHERE term > ? AND term < ?", (term, after)).fetchall()
        else:
            rows = conn.execute("SELECT entries FROM postings WHERE term > ? AND substr(term, 1, ?) = ?",
                                (term, len(term), term)).fetchall()  # fmt: skip
        return [row[0] for row in rows]


def entry_dtype() -> np.dtype:
    """One posting: chunk id (int32), weighted occurrences and weighted chunk length (uint16), little-endian."""
    return _entry()


def rank(
    conn: sqlite3.Connection | TermLookup, query_terms: Iterable[str], stats: Stats, limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """(chunk ids, BM25 scores) of the best `limit` chunks matching a query term, best first (ties by
    chunk id).

    Each distinct term matches itself; a term that is no term of the index matches, as a prefix,
    the terms it begins ("portab" finds "portable"), except a one-letter ASCII term (as a prefix it
    would match most of the index). A term found in at least half of the chunks adds almost nothing
    to BM25 (its inverse document frequency is not positive), so it is left out when rarer terms
    remain: chunks that match only such words are not scored at all, which changes no ranking
    among the rest.
    """
    import numpy as np

    lookup = SqliteTerms(conn) if isinstance(conn, sqlite3.Connection) else conn
    distinct = list(dict.fromkeys(query_terms))
    owned = lookup.own(distinct)  # in one request: a database server answers them in one round trip
    matched = [found for term, own in zip(distinct, owned, strict=True)
               if _size(found := own if isinstance(own, int) else _matches(lookup, term, own))]  # fmt: skip
    rarer = [entries for entries in matched if 2 * _size(entries) < stats.chunks]
    chosen = [entries for entries in rarer or matched if not isinstance(entries, int)]
    if len(chosen) < len(rarer or matched):
        raise RuntimeError("the lookup left out the postings of a term the ranking needs")
    if not chosen or limit < 1:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    chunk_ids = np.concatenate([entries["chunk"] for entries in chosen])
    weights = np.concatenate([_weights(entries, stats) for entries in chosen])
    dense = np.bincount(chunk_ids, weights=weights)
    found = np.flatnonzero(dense)
    scores = dense[found]
    if found.size > limit:  # everything scoring at least the limit-th best, then ordered
        cut = np.partition(scores, found.size - limit)[found.size - limit]
        kept = scores >= cut
        found, scores = found[kept], scores[kept]
    order = np.lexsort((found, -scores))[:limit]
    return found[order], scores[order]


def _size(entries: np.ndarray | int) -> int:
    """How many chunks a query term matches: its entries, or their number when the lookup left them unread."""
    return entries if isinstance(entries, int) else int(entries.size)


def _matches(lookup: TermLookup, term: str, own: bytes | None) -> np.ndarray:
    """The postings of one query term: its own (`own`), else the merged postings of every term it prefixes."""
    import numpy as np

    if own is not None or (len(term) == 1 and term.isascii()):
        return np.frombuffer(own or b"", dtype=_entry())
    rows = lookup.prefixed(term)
    if len(rows) <= 1:
        return np.frombuffer(rows[0] if rows else b"", dtype=_entry())
    entries = np.concatenate([np.frombuffer(row, dtype=_entry()) for row in rows])
    counts = np.bincount(entries["chunk"], weights=entries["count"])
    lengths = np.zeros(counts.size, dtype=np.uint16)
    lengths[entries["chunk"]] = entries["length"]
    chunks = np.flatnonzero(counts)
    merged = np.empty(chunks.size, dtype=_entry())
    merged["chunk"], merged["length"] = chunks, lengths[chunks]
    merged["count"] = np.minimum(counts[chunks], MAX_COUNT)
    return merged


def _weights(entries: np.ndarray, stats: Stats) -> np.ndarray:
    """BM25 of one query term for each chunk in its postings."""
    found = entries.size
    idf = max(IDF_FLOOR, math.log((stats.chunks - found + 0.5) / (found + 0.5)))
    count = entries["count"].astype(float)
    norm = K1 * (1.0 - B + B * entries["length"] / stats.average_length)
    weights: np.ndarray = idf * count * (K1 + 1.0) / (count + norm)
    return weights

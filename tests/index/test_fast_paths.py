"""The chunker's and the lexical index's fast paths give exactly what the straightforward definitions
give, on arbitrary text (Unicode whitespace, line breaks, carriage returns and markdown included):
sections found line by line, pieces cut line by line, words counted per line, and term counts made
word by word; a record file splits into frontmatter and body without copying the body twice."""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterator
from unittest.mock import patch

import pytest
import Stemmer
from hypothesis import given, settings
from hypothesis import strategies as st

from stormbuffer.core.codec import split_markdown
from stormbuffer.index import chunking, postings
from stormbuffer.index.chunking import approximate_token_count, chunk_body
from stormbuffer.index.postings import FIELD_WEIGHTS, MAX_COUNT, _Accumulator, weighted_terms

# Pieces that make markdown-ish text with the characters the fast paths treat specially.
PIECES = ["a", "bé", "x y z", "2026-03-01T10:00", " ", "  ", "\t", "\n", "\n\n", "\r", "\r\n", "\u3000", "\xa0",
          "\x1c", "\u2028", "\x85", "\x0b", "#", "# ", "## Head", "###### six ##", "####### seven", "```", "~~~",
          "```py", "- ", "* ", "+\t", "1. ", "12) ", "Dr. ", "3.5", "_", "İ", "ΣΊΣΥΦΟΣ", "東京", "ﬁ"]  # fmt: skip
TEXT = st.lists(st.sampled_from(PIECES), max_size=80).map("".join) | st.text(max_size=120)


def sections_line_by_line(body: str) -> list[tuple[str | None, str, bool]]:
    """Pass 1 as its definition reads: every line of ``body.split("\\n")`` looked at in turn."""
    builder = chunking._SectionBuilder()
    fence_close: str | None = None
    lines = body.split("\n")
    if lines[-1] == "":
        lines.pop()
    for line in (line.removesuffix("\r") for line in lines):
        stripped = line.lstrip()
        if fence_close is not None:
            builder.append(line)
            if stripped.startswith(fence_close):
                fence_close = None
                builder.flush()
        elif stripped.startswith(("```", "~~~")):
            fence_close = stripped[0] * 3
            builder.start(line, atomic=True)
        elif stripped[:1] == "#" and (heading := chunking._parse_heading(stripped)) is not None:
            builder.heading(*heading)
        elif not stripped:
            builder.flush()
        elif not builder.atomic and chunking._LIST_MARKER.match(stripped):
            builder.start(line, atomic=True)
        else:
            builder.append(line)
    builder.flush()
    if not builder.sections and builder.heading_texts:
        return [(None, "\n".join(builder.heading_texts), False)]
    return [(section.heading, section.text, section.atomic) for section in builder.sections]


def split_line_by_line(text: str, max_words: int) -> Iterator[tuple[str, int]]:
    """Pieces of at most ``max_words`` words as their definition reads: line by line, a line over the
    limit cut between words."""
    piece: list[str] = []
    piece_words = 0
    for line in text.split("\n"):
        words = len(line.split())
        if piece and piece_words + words > max_words:
            yield "\n".join(piece), piece_words
            piece, piece_words = [], 0
        if words <= max_words:
            piece.append(line)
            piece_words += words
            continue
        spans = [match.span() for match in re.finditer(r"\S+", line)]
        tail_start = (len(spans) - 1) // max_words * max_words
        for start in range(0, tail_start, max_words):
            yield line[spans[start][0] : spans[start + max_words - 1][1]], max_words
        piece, piece_words = [line[spans[tail_start][0] : spans[-1][1]]], len(spans) - tail_start
    if piece:
        yield "\n".join(piece), piece_words


@settings(max_examples=600, deadline=None)
@given(TEXT)
def test_sections_are_those_found_line_by_line(body: str) -> None:
    found = [(section.heading, section.text, section.atomic) for section in chunking._sections(body)]
    assert found == sections_line_by_line(body)


@settings(max_examples=400, deadline=None)
@given(TEXT, st.integers(min_value=1, max_value=6))
def test_pieces_are_those_cut_line_by_line(text: str, max_words: int) -> None:
    assert list(chunking._split_by_words(text, max_words)) == list(split_line_by_line(text, max_words))


ASCII_PIECES = [piece for piece in PIECES if piece.isascii()] + ["\x0c", "\x1f", "\x7f", "a\x1db"]
ASCII_TEXT = st.lists(st.sampled_from(ASCII_PIECES), max_size=80).map("".join) | st.text(
    alphabet=st.characters(max_codepoint=127), max_size=120
)


@settings(max_examples=400, deadline=None)
@given(TEXT | ASCII_TEXT, st.integers(min_value=1, max_value=150))
def test_words_per_line_counted_at_once_are_those_counted_line_by_line(text: str, block: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chunking, "_BLOCK_CHARS", block)  # many blocks of lines, or one
        starts, counts = chunking._line_words_at_once(text)
    lines = text.split("\n")
    assert counts == [len(line.split()) for line in lines]
    assert [text[start : end - 1] for start, end in zip(starts, starts[1:], strict=False)] == lines


def test_the_whitespace_tables_are_str_isspace() -> None:
    assert list(chunking._ASCII_WHITESPACE[:128]) == [chr(code).isspace() for code in range(128)]
    table = chunking._whitespace_table()
    assert table.tolist()[:-1] == [chr(code).isspace() for code in range(chunking._LAST_SPACE + 1)]
    above = range(chunking._LAST_SPACE + 1, sys.maxunicode + 1)
    assert not table[-1] and not any(chr(code).isspace() for code in above)


@settings(max_examples=150, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=30).map("\n".join), st.integers(min_value=2, max_value=12))
def test_a_long_body_chunks_alike_either_way_of_counting_words(body: str, max_words: int) -> None:
    """Words per line counted with NumPy (a long text) or line by line give the same chunks."""

    def chunks() -> list[tuple[object, ...]]:
        found = chunk_body("T", body, count_tokens=approximate_token_count, max_tokens=24, max_words=max_words,
                           exact_chunks=2)  # fmt: skip
        return [(c.ordinal, c.heading, c.text, c.embed_text, c.word_count) for c in found]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chunking, "_COUNTED_AT_ONCE", 0)
        at_once = chunks()
    assert at_once == chunks()


@settings(max_examples=300, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=30).map("\n".join), st.integers(min_value=4, max_value=40),
       st.floats(min_value=0.0, max_value=3.0), st.none() | st.integers(min_value=1, max_value=5))  # fmt: skip
def test_pieces_fitted_to_tokens_do_not_depend_on_where_the_search_starts(
    text: str, limit: int, share: float, most: int | None
) -> None:
    """The first piece's search may start from a guess (the part of the text a piece takes); the
    pieces are those found from one span, the search's plain start."""

    def fits(piece: str) -> bool:
        return approximate_token_count(piece) <= limit

    try:
        plain = chunking._split_to_fit(text, fits, most)
    except ValueError:  # one character over the limit: either way
        with pytest.raises(ValueError):
            chunking._split_to_fit(text, fits, most, share)
        return
    assert chunking._split_to_fit(text, fits, most, share) == plain


def terms_word_by_word(retrieval_text: str) -> tuple[Counter[str], int]:
    """A retrieval text's weighted term counts and length, one word at a time."""
    stem = Stemmer.Stemmer("english").stemWord
    counts: Counter[str] = Counter()
    length = 0
    for field, weight in zip(retrieval_text.split("\n", len(FIELD_WEIGHTS) - 1), FIELD_WEIGHTS, strict=False):
        for word in re.findall(r"\w+", field):
            counts[stem(word.lower())] += weight
            length += weight
    return counts, length


@settings(max_examples=400, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=8).map("\n".join))
def test_weighted_terms_are_those_counted_word_by_word(text: str) -> None:
    known: dict[str, str] = {}
    assert weighted_terms(text, known, {}) == terms_word_by_word(text)
    assert weighted_terms("Deploys\n\n\n\nnote.md\n" + text) == terms_word_by_word("Deploys\n\n\n\nnote.md\n" + text)


# Retrieval texts: the fields before the chunk text (none, some shared, non-ASCII), then a chunk text that
# is often plain ASCII (counted in one pass over the batch's bytes) and sometimes not.
PREFIXES = ["", "Deploys\n\n\n\nnote.md\n", "Über Σ\nRunbook › Steps\nİstanbul notes\nops\nx.md\n"]
ASCII = st.text(alphabet=st.characters(max_codepoint=127), max_size=200)
# ASCII words around the length up to which a word is numbered by its bytes as one 64-bit key (8)
KEYED = (
    "a Zz deploy Deploys 1234567 12345678 123456789 ABCDEFGH abcdefgh abcdefghi x_y_z_w_ x_y_z_w_v _ __init__".split()
)
KEYED += ["q" * 16, "Q" * 17, "0123456789abcdef" * 2]
WORDY = st.lists(st.sampled_from(KEYED) | st.sampled_from([" ", "\n", "-", ". ", "\t", "/"]), max_size=60).map("".join)
RETRIEVAL_TEXT = st.tuples(st.sampled_from(PREFIXES), ASCII | WORDY | TEXT).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(RETRIEVAL_TEXT, min_size=1, max_size=12), st.integers(1, 400), st.integers(1, 60),
       st.integers(0, 300) | st.just(postings._KEYED_FROM))  # fmt: skip
def test_postings_counted_in_batches_are_those_counted_word_by_word(
    texts: list[str], batch: int, fold: int, keyed_from: int
) -> None:
    accumulator = _Accumulator()
    accumulator.BATCH_CHARS, accumulator.FOLD = batch, fold  # many batches and folds, or one
    chunks = [(3 * number + 1, text) for number, text in enumerate(texts)]
    expected: dict[str, list[tuple[int, int, int]]] = {}
    total = 0
    for chunk, text in chunks:
        counts, length = terms_word_by_word(text)
        total += length
        for term, occurrences in counts.items():
            expected.setdefault(term, []).append((chunk, min(occurrences, MAX_COUNT), min(length, MAX_COUNT)))
    with patch.object(postings, "_KEYED_FROM", keyed_from):  # words numbered by key from this batch size on
        assert accumulator.add_all(chunks) == total
    assert set(accumulator.terms) == set(expected)
    assert {term: accumulator.packed(term).tolist() for term in expected} == expected


LINE = st.text(alphabet=st.characters(blacklist_characters="\n\r"), max_size=12).filter(lambda s: s[:3] != "+++")
BREAK = st.sampled_from(["\n", "\r\n"])


@settings(max_examples=300, deadline=None)
@given(st.lists(LINE, min_size=1, max_size=5), TEXT, BREAK, BREAK)
def test_a_record_file_splits_into_frontmatter_and_body(lines: list[str], body: str, opening: str, end: str) -> None:
    """The body comes back as it was after the blank line that follows the closing delimiter."""
    frontmatter = end.join(lines)
    assert split_markdown(f"+++{opening}{frontmatter}{end}+++{end}{end}{body}") == (frontmatter, body)
    with pytest.raises(ValueError, match="blank line"):
        split_markdown(f"+++{opening}{frontmatter}{end}+++{end}x{body}")

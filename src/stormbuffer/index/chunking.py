"""Deterministic structural chunking of a record body, capped by the embedding model's token limit.

Pass 1 cuts the body into sections. Lines come from ``body.split("\\n")`` with one trailing
``"\\r"`` removed per line (a final newline adds no empty line). Headings (``#`` to ``######``
followed by whitespace and text; a closing run of ``#`` after whitespace is dropped) end the current
section and update the heading stack; heading lines belong to no section, and a section's heading
is the stack's texts joined with ``" / "``. A blank line ends a section. A fence (a line starting
with three backticks or three tildes after indentation) is one atomic section up to the line that
starts with three of its fence character, or to the end of the body. A list item starts an atomic
section that takes every following non-blank line until a blank line, heading or fence.

Pass 2 turns sections into chunks of at most ``max_words`` whitespace-separated words. An atomic
section is a chunk of its own. A larger plain section is cut into pieces of at most ``max_words``
words. Small sections under the same heading path are merged, joined by a blank line, while the
words plus one per separator stay within ``max_words``.

Departures from the plain structural rules, on purpose:

1. Token cap. Every chunk's embedding text (``title\\nheading\\ntext``, or ``title\\ntext`` without
   a heading path) fits ``max_tokens`` according to the caller's ``count_tokens``. A chunk that
   does not fit is split at line boundaries first (so code stays readable; a large atomic block
   becomes consecutive pieces of whole lines), then at word boundaries for an over-long line, then
   at character boundaries for one giant word (long identifiers, base64, minified JSON). Pieces
   are verbatim slices of the chunk text, so nothing is lost or rewritten. When the title (or
   title plus heading path) leaves fewer than ``MIN_TEXT_TOKENS`` tokens for text, it is shortened
   inside the embedding text only.
2. A body made only of headings yields one chunk holding the heading texts, so the record stays
   searchable.
3. A list starts only at a real list marker: ``-``, ``*``, ``+``, or digits followed by ``.`` or
   ``)``, then a space or tab. "Dr. Smith" or "e.g. this" are plain text.
4. A plain section over ``max_words`` words is cut at the last line boundary that keeps a piece
   within the limit, so line breaks survive; only a single line over the limit is cut between
   words (keeping the original spacing inside each piece).
5. A closing fence line ends the fenced section; text right after it starts a new section.

6. Vector cap. Only the first ``exact_chunks`` chunks are fitted to the token limit (the ones that
   get vectors, ``VECTOR_CHUNKS`` in a projection); the rest of a long body is cut by words alone
   (``max_words``, at line boundaries), with no tokenizer call: those chunks are searched lexically
   only, and cutting them costs time linear in their length.

No chunk is empty or whitespace-only. ``word_count`` is the number of whitespace-separated words
in the chunk text.

A chunk's *sentences* (``sentences``) are the pieces its text cuts into at sentence ends and line
breaks, short ones merged into the next until a piece has ``SENTENCE_WORDS`` words. Each has a
vector of its own when there are several (``own_sentences``), so that a fact mentioned in passing in a long chunk is
not averaged away (see ``retrieval/semantic.py``).
"""

from __future__ import annotations

import math
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from itertools import accumulate
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

MAX_TOKENS = 256
MAX_WORDS = 160
MIN_TEXT_TOKENS = 32
HEADING_SEPARATOR = " / "
SENTENCE_WORDS = 20
VECTOR_CHUNKS = 32  # chunks of one record that get vectors; later ones are searched lexically only
LEXICAL_CHARS = 4096  # longest chunk past the vector cap

_HEADING = re.compile(r"(#{1,6})\s(.*)")
_CLOSING_HASHES = re.compile(r"(?:^|\s)#+$")
_LIST_MARKER = re.compile(r"(?:[-*+]|[0-9]+[.)])[ \t]")
_WORD = re.compile(r"\S+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_LETTERS_OR_SYMBOL = re.compile(r"[A-Za-z]+|\S")
# The start of a line that may be markup: blank, or (after indentation) a fence, "#" or a list marker.
# Every other line is plain text, whatever the state (a line in a fence or a list item is appended too).
# The quantifiers are possessive: giving back a space or a digit never lets an alternative match, and
# a log's lines that start with digits are passed over without trying each shorter run.
_MARKUP_START = r"[^\S\n]*+(?:$|```|~~~|#|(?:[-*+]|[0-9]++[.)])[ \t])"
_MARKUP_FIRST_LINE = re.compile(_MARKUP_START, re.MULTILINE)
_MARKUP_LINE = re.compile("\n" + _MARKUP_START, re.MULTILINE)  # a later line, found by its line break


@dataclass(frozen=True)
class Chunk:
    """One chunk: position in the record, heading path, verbatim text and the text to embed."""

    ordinal: int
    heading: str | None
    text: str
    embed_text: str
    word_count: int


def chunk_body(
    title: str,
    body: str,
    *,
    count_tokens: Callable[[str], int],
    max_tokens: int = MAX_TOKENS,
    max_words: int = MAX_WORDS,
    exact_chunks: int | None = None,
) -> list[Chunk]:
    """Chunks of ``body`` in order; each of the first ``exact_chunks`` (all when None) has an
    embedding text of at most ``max_tokens`` tokens, the later ones are cut by words alone."""
    if max_tokens < 1 or max_words < 1:
        raise ValueError("max_tokens and max_words must be positive")
    budget = _TokenBudget(count_tokens, max_tokens)
    chunks: list[Chunk] = []
    for heading, text, words in _word_chunks(_sections(body), max_words):
        if exact_chunks is None or len(chunks) < exact_chunks:
            most = None if exact_chunks is None else exact_chunks - len(chunks)
            fitted, rest = _fit_chunk(title, heading, text, budget, most)
            for piece, embed_text in fitted:
                chunks.append(Chunk(len(chunks), heading, piece, embed_text, len(piece.split())))
            text, words = text[rest:], None
        for piece, piece_words in _lexical_pieces(text, max_words, words):
            chunks.append(Chunk(len(chunks), heading, piece, _embed_prefix(title, heading) + piece, piece_words))
    return chunks


def _lexical_pieces(text: str, max_words: int, words: int | None = None) -> Iterator[tuple[str, int]]:
    """``text`` cut by words alone (chunks past the vector cap), each piece at most
    ``LEXICAL_CHARS`` characters (a giant word is sliced), with its word count. ``words``: how many
    words ``text`` has when known, else counted up to the limit; a text within ``max_words`` is one
    piece."""
    if words is None:
        words = len(text.split(maxsplit=max_words))  # the count when within the limit, else above it
    for piece, piece_words in [(text, words)] if words <= max_words else _split_by_words(text, max_words):
        piece = piece.strip("\n")
        if len(piece) <= LEXICAL_CHARS:
            if piece_words:
                yield piece, piece_words
            continue
        for start in range(0, len(piece), LEXICAL_CHARS):
            part = piece[start : start + LEXICAL_CHARS]
            if part.strip():
                yield part, len(part.split())


def sentences(text: str, min_words: int = SENTENCE_WORDS) -> list[str]:
    """``text`` cut at sentence ends and line breaks, each short piece merged into the next until it
    has ``min_words`` words (a short rest joins the last piece); a text that does not divide is one
    piece. Each sentence's parts are joined by single spaces."""
    return [" ".join(_parts(text[start:end])) for start, end in sentence_spans(text, min_words)]


def sentence_spans(text: str, min_words: int = SENTENCE_WORDS) -> list[tuple[int, int]]:
    """Where each of ``sentences(text)`` lies in ``text``: (start, end) character offsets, from its
    first part's first character to its last part's last."""
    spans: list[tuple[int, int]] = []
    start, end, words = -1, 0, 0
    for first, last in _part_spans(text):
        part = text[first:last]
        stripped = part.strip()
        if not stripped:
            continue
        first += len(part) - len(part.lstrip())
        start = first if start < 0 else start
        end = first + len(stripped)
        words += len(stripped.split())
        if words >= min_words:
            spans.append((start, end))
            start, words = -1, 0
    if start >= 0 and spans:
        spans[-1] = (spans[-1][0], end)
    elif start >= 0:
        spans.append((start, end))
    return spans


def own_sentences(text: str, min_words: int = SENTENCE_WORDS) -> list[str]:
    """The sentences of ``text`` that get vectors of their own: none when it is one piece, which the
    chunk's own vector already says."""
    cut = sentences(text, min_words)
    return cut if len(cut) > 1 else []


def _part_spans(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of the pieces of ``text`` between sentence ends and line breaks (as ``re.split``)."""
    position = 0
    for separator in _SENTENCE_END.finditer(text):
        yield position, separator.start()
        position = separator.end()
    yield position, len(text)


def _parts(text: str) -> list[str]:
    """``text``'s non-blank pieces between sentence ends and line breaks, stripped."""
    return [part for part in (piece.strip() for piece in _SENTENCE_END.split(text)) if part]


def approximate_token_count(text: str) -> int:
    """A conservative stand-in for the model tokenizer, for use only when it is unavailable.

    Accents are stripped as BERT's uncased normaliser does (NFD, combining marks dropped); then
    each run of ASCII letters counts one token per three letters (rounded up), and every other
    non-whitespace character (digit, punctuation, symbol, CJK or other letter) counts one token;
    two more account for [CLS] and [SEP]. For prose, code, JSON, paths, numbers, hashes and CJK
    text this is at least what WordPiece produces (typically 1.2–1.4 times as much); strings of
    random letters can exceed it.
    """
    decomposed = unicodedata.normalize("NFD", text)
    stripped = "".join(ch for ch in decomposed if unicodedata.category(ch) != "Mn")
    return 2 + sum(math.ceil(len(match) / 3) for match in _LETTERS_OR_SYMBOL.findall(stripped))


# --- Pass 1: sections ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Section:
    heading: str | None
    text: str
    atomic: bool


class _SectionBuilder:
    """Collects lines into sections while tracking the heading stack."""

    def __init__(self) -> None:
        self.sections: list[_Section] = []
        self.heading_texts: list[str] = []
        self._stack: list[tuple[int, str]] = []
        self._heading: str | None = None  # the stack's texts joined
        self._lines: list[str] = []
        self._atomic = False

    @property
    def atomic(self) -> bool:
        return self._atomic

    def flush(self) -> None:
        if self._lines:
            self.sections.append(_Section(self._heading, "\n".join(self._lines), self._atomic))
        self._lines = []
        self._atomic = False

    def start(self, line: str, *, atomic: bool) -> None:
        self.flush()
        self._lines = [line]
        self._atomic = atomic

    def append(self, line: str) -> None:
        self._lines.append(line)

    def heading(self, level: int, text: str) -> None:
        self.flush()
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, text))
        self._heading = HEADING_SEPARATOR.join(text for _, text in self._stack)
        self.heading_texts.append(text)


def _parse_heading(stripped: str) -> tuple[int, str] | None:
    match = _HEADING.match(stripped)
    if match is None:
        return None
    text = _CLOSING_HASHES.sub("", match.group(2).strip()).strip()
    return (len(match.group(1)), text) if text else None


def _sections(body: str) -> list[_Section]:
    """Pass 1. Only the lines that may be markup (`_MARKUP_LINE`) are looked at one by one; the plain
    lines between two of them go to the builder as one block (their line breaks are kept)."""
    builder = _SectionBuilder()
    fence_close: str | None = None
    end = len(body) - 1 if body.endswith("\n") else len(body)  # a final newline adds no empty line
    position = 0
    for start in _markup_lines(body, end):
        if start > position:
            builder.append(_plain_lines(body[position : start - 1]))
        line_end = body.find("\n", start, end)
        position = end + 1 if line_end < 0 else line_end + 1
        fence_close = _markup_line(builder, body[start : position - 1].removesuffix("\r"), fence_close)
    if position < end:
        builder.append(_plain_lines(body[position:end]))
    builder.flush()
    if not builder.sections and builder.heading_texts:
        return [_Section(None, "\n".join(builder.heading_texts), atomic=False)]
    return builder.sections


def _markup_lines(body: str, end: int) -> Iterator[int]:
    """Where each line of ``body[:end]`` that may be markup starts."""
    if _MARKUP_FIRST_LINE.match(body, 0, end):
        yield 0
    for match in _MARKUP_LINE.finditer(body, 0, end):
        yield match.start() + 1


def _plain_lines(block: str) -> str:
    """Lines without markup, one trailing carriage return removed from each."""
    return block.replace("\r\n", "\n").removesuffix("\r") if "\r" in block else block


def _markup_line(builder: _SectionBuilder, line: str, fence_close: str | None) -> str | None:
    """Give one line that may be markup to the builder; returns the fence it leaves open, if any."""
    stripped = line.lstrip()
    if fence_close is not None:
        builder.append(line)
        if stripped.startswith(fence_close):
            builder.flush()
            return None
        return fence_close
    if stripped.startswith(("```", "~~~")):
        builder.start(line, atomic=True)
        return stripped[0] * 3
    if stripped[:1] == "#" and (heading := _parse_heading(stripped)) is not None:
        builder.heading(*heading)
    elif not stripped:
        builder.flush()
    elif not builder.atomic and _LIST_MARKER.match(stripped):
        builder.start(line, atomic=True)
    else:
        builder.append(line)
    return None


# --- Pass 2: word-limited chunks ----------------------------------------------------------------


def _word_chunks(sections: list[_Section], max_words: int) -> Iterator[tuple[str | None, str, int | None]]:
    """(heading, text, words) of each word-limited chunk; words None for an atomic section (not counted)."""
    pending: list[str] = []
    pending_heading: str | None = None
    pending_words = 0
    for section in sections:
        words = len(section.text.split(maxsplit=max_words))  # the count when within the limit, else above it
        mergeable = not section.atomic and words <= max_words
        if mergeable and pending and section.heading == pending_heading:
            if pending_words + 1 + words <= max_words:
                pending.append(section.text)
                pending_words += 1 + words
                continue
        if pending:
            yield pending_heading, "\n\n".join(pending), pending_words - (len(pending) - 1)
            pending = []
        if mergeable:
            pending, pending_heading, pending_words = [section.text], section.heading, words
        elif section.atomic:
            yield section.heading, section.text, None
        else:
            for piece, piece_words in _split_by_words(section.text, max_words):
                yield section.heading, piece, piece_words
    if pending:
        yield pending_heading, "\n\n".join(pending), pending_words - (len(pending) - 1)


def _split_by_words(text: str, max_words: int) -> Iterator[tuple[str, int]]:
    """Pieces of at most ``max_words`` words, cut at line boundaries unless one line is too long,
    each with its number of words. Each piece takes as many whole lines as fit, found by bisecting
    the running word count instead of line by line."""
    starts, counts = _line_words(text)
    total = list(accumulate(counts, initial=0))  # words before each line
    parts: list[str] = []  # the piece so far: a long line's tail and the text of whole lines
    piece_words = 0
    line = 0
    while line < len(counts):
        words = counts[line]
        if parts and piece_words + words > max_words:
            yield "\n".join(parts), piece_words
            parts, piece_words = [], 0
        if words <= max_words:  # this line and every following one that fits
            last = bisect_right(total, total[line] + max_words - piece_words, line + 1) - 1
            parts.append(text[starts[line] : starts[last] - 1])
            piece_words += total[last] - total[line]
            line = last
            continue
        spans = [match.span() for match in _WORD.finditer(text, starts[line], starts[line + 1] - 1)]
        tail_start = (len(spans) - 1) // max_words * max_words
        for start in range(0, tail_start, max_words):
            yield text[spans[start][0] : spans[start + max_words - 1][1]], max_words
        parts, piece_words = [text[spans[tail_start][0] : spans[-1][1]]], len(spans) - tail_start
        line += 1
    if parts:
        yield "\n".join(parts), piece_words


_COUNTED_AT_ONCE = 65_536  # characters from which words per line are counted with NumPy
_BLOCK_CHARS = 1 << 18  # characters of a large text whose words per line are counted at once
_LAST_SPACE = 0x3000  # the highest code point that `str.isspace` holds for
_ASCII_WHITESPACE = bytes(chr(code).isspace() for code in range(256))  # 1 for whitespace, else 0


def _line_words(text: str) -> tuple[list[int], list[int]]:
    """Where each line of ``text`` (split at ``"\\n"``) starts, with one more entry one past the end
    of the text, and how many whitespace-separated words each has."""
    if len(text) >= _COUNTED_AT_ONCE:
        return _line_words_at_once(text)
    lines = text.split("\n")
    return list(accumulate((len(line) + 1 for line in lines), initial=0)), [len(line.split()) for line in lines]


def _line_words_at_once(text: str) -> tuple[list[int], list[int]]:
    """`_line_words` over the text's code points as arrays, a block of lines of about
    `_BLOCK_CHARS` characters at a time (the arrays of a large text stay small and their memory is
    reused): a word starts at each character that is not whitespace (``str.isspace``) after one that
    is, and a line holds the starts between its first character and the next line's."""
    import numpy as np

    starts: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    first = 0
    while True:  # each block ends before a line break (no word crosses one) or at the end of the text
        cut = text.find("\n", first + _BLOCK_CHARS) if first + _BLOCK_CHARS < len(text) else -1
        block_starts, block_counts = _block_line_words(text[first:] if cut < 0 else text[first:cut])
        block_starts += first
        starts.append(block_starts if cut < 0 else block_starts[:-1])  # the last: where the next block starts
        counts.append(block_counts)
        if cut < 0:
            return np.concatenate(starts).tolist(), np.concatenate(counts).tolist()
        first = cut + 1


def _block_line_words(text: str) -> tuple[np.ndarray, np.ndarray]:
    """`_line_words` of one block, as arrays."""
    import numpy as np

    if text.isascii():  # one byte per character: whitespace flagged by `bytes.translate`
        data = text.encode("ascii")
        codes = np.frombuffer(data, dtype=np.uint8)
        space = np.frombuffer(data.translate(_ASCII_WHITESPACE), dtype=np.bool_)
    else:
        table = _whitespace_table()
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        space = table[np.minimum(codes, table.size - 1)]
    begins = ~space
    begins[1:] &= space[:-1]
    starts = np.concatenate(([0], np.flatnonzero(codes == ord("\n")) + 1, [codes.size + 1]))
    counts = np.diff(np.searchsorted(np.flatnonzero(begins), starts[:-1]), append=int(begins.sum()))
    return starts, counts


@cache
def _whitespace_table() -> np.ndarray:
    """By code point up to U+3000 (the last whitespace character), whether ``str.isspace`` holds;
    one more False entry stands for every code point above."""
    import numpy as np

    return np.array([chr(code).isspace() for code in range(_LAST_SPACE + 1)] + [False])


# --- Token cap ----------------------------------------------------------------------------------


_WORDS_FIRST = 8  # characters per token beyond which a text's words are counted before its tokens


class _TokenBudget:
    """Memoised token counts against one limit."""

    def __init__(self, count_tokens: Callable[[str], int], max_tokens: int) -> None:
        self._count_tokens = count_tokens
        self._counts: dict[str, int] = {}
        self.max_tokens = max_tokens

    def count(self, text: str) -> int:
        if text not in self._counts:
            self._counts[text] = self._count_tokens(text)
        return self._counts[text]

    def counted(self, text: str) -> int | None:
        """The text's count when it was counted, else None."""
        return self._counts.get(text)

    def fits(self, text: str, limit: int | None = None) -> bool:
        limit = self.max_tokens if limit is None else limit
        if len(text) > _WORDS_FIRST * limit and len(text.split()) + 2 > limit:
            return False  # every word is a token at least: a long text is not handed to the tokenizer
        return self.count(text) <= limit


def _embed_prefix(title: str, heading: str | None) -> str:
    return f"{title}\n{heading}\n" if heading else f"{title}\n"


def _fit_chunk(
    title: str, heading: str | None, text: str, budget: _TokenBudget, most: int | None = None
) -> tuple[list[tuple[str, str]], int]:
    """``(text, embedding text)`` pairs covering ``text`` (at most ``most`` of them), each embedding
    text within the budget, and the offset in ``text`` where the pairs stop covering it."""
    embed_text = _embed_prefix(title, heading) + text
    if budget.fits(embed_text):
        return [(text, embed_text)], len(text)
    prefix = _fitted_prefix(title, heading, budget)
    counted = budget.counted(embed_text)  # None when its words alone ruled it out
    share = 0.0 if not counted else budget.max_tokens / counted  # about the part of the text one piece takes
    pieces, rest = _split_to_fit(text, lambda piece: budget.fits(prefix + piece), most, share)
    return [(piece, prefix + piece) for piece in pieces], rest


def _fitted_prefix(title: str, heading: str | None, budget: _TokenBudget) -> str:
    """The embedding prefix, shortened so that it leaves room for at least some text."""
    limit = budget.max_tokens - min(MIN_TEXT_TOKENS, budget.max_tokens // 2)
    title = _shortened(title, lambda text: budget.fits(text, limit))
    if heading:
        heading = _shortened(heading, lambda text: budget.fits(f"{title}\n{text}", limit))
    return _embed_prefix(title, heading)


def _shortened(text: str, fits: Callable[[str], bool]) -> str:
    """``text`` itself when it fits, else a long prefix of it that fits, right-trimmed."""
    if fits(text):
        return text
    return text[: _longest_fit(len(text), lambda size: fits(text[:size]))].rstrip()


def _longest_fit(limit: int, fits: Callable[[int], bool], guess: int = 1) -> int:
    """A size ``n <= limit`` with ``fits(n)`` and ``not fits(n + 1)``, or 0 when 1 does not fit.

    Probes ``guess`` first, gallops away from it (steps 1, 2, 4, …) and then bisects, so the cost
    grows with the distance between guess and answer, not with ``limit``. ``fits(0)`` is assumed.
    """
    if limit <= 0:
        return 0
    probe = min(max(guess, 1), limit)
    step = 1
    if fits(probe):
        good, bad = probe, limit + 1  # bad = limit + 1 is never probed
        while good + step < bad and fits(good + step):
            good, step = good + step, step * 2
        bad = min(bad, good + step)
    else:
        good, bad = 0, probe
        while bad - step > good and not fits(bad - step):
            bad, step = bad - step, step * 2
        good = max(good, bad - step)
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good


def _split_to_fit(
    text: str, fits: Callable[[str], bool], most: int | None = None, share: float = 0.0
) -> tuple[list[str], int]:
    """Verbatim slices of ``text`` covering all its non-whitespace, each accepted by ``fits``; with
    ``most``, only that many, and the offset where the text they leave begins.

    Works on spans: non-blank lines at first; a span that does not fit on its own is replaced by
    its words, and a single word by consecutive slices that fit. Each piece takes as many
    consecutive spans as fit. Spans are kept in reverse order so that the next one is at the end.
    ``share``: about the part of the text one piece takes (from its token count), which the search
    for the first piece starts from; the pieces do not depend on it.
    """
    spans: list[tuple[int, int]] = []
    offset = 0
    for line in text.split("\n"):
        if line.strip():
            spans.append((offset, offset + len(line.rstrip())))
        offset += len(line) + 1
    spans.reverse()
    pieces: list[str] = []
    guess = max(1, int(len(spans) * share))  # later pieces tend to take as many spans as the previous one
    while spans and (most is None or len(pieces) < most):
        count = _longest_fit(len(spans), lambda n: fits(text[spans[-1][0] : spans[-n][1]]), guess)
        if count == 0:
            spans.extend(reversed(_refine(text, spans.pop(), fits)))
            guess = 1
            continue
        pieces.append(text[spans[-1][0] : spans[-count][1]])
        del spans[-count:]
        guess = count
    return pieces, spans[-1][0] if spans else len(text)


def _refine(text: str, span: tuple[int, int], fits: Callable[[str], bool]) -> list[tuple[int, int]]:
    """Smaller spans covering the non-whitespace of a span that does not fit on its own.

    A span of several words becomes its words; a single word becomes consecutive fitting slices.
    """
    start, end = span
    words = [match.span() for match in _WORD.finditer(text, start, end)]
    if words != [span]:
        return words
    slices: list[tuple[int, int]] = []
    size = 1
    while start < end:
        size = _longest_fit(end - start, _prefix_fits(text, start, fits), size)
        if size == 0:
            raise ValueError("a single character does not fit within the token limit")
        slices.append((start, start + size))
        start += size
    return slices


def _prefix_fits(text: str, start: int, fits: Callable[[str], bool]) -> Callable[[int], bool]:
    return lambda size: fits(text[start : start + size])

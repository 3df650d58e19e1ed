"""The long token runs of UTF-8 text, found once for our rules and the engine.

A run is a stretch of token characters (letters, digits, `+/_.-`; `=` ends one, so `name=value`
has the value as a run of its own). The text is mapped to a shape of `t`s and spaces, so that the
next run of SHORTEST characters is a substring search away: far faster than a regular expression,
which would try every position of every word. Runs of hex digits and dashes alone (digests, UUIDs,
commit hashes) and subresource integrity digests (`sha512-` and base64) are no vendor token and no
secret, so they are skipped. The engine does not read base64 of plain words either (encoded prose, as
in test data and examples): it holds no name, assignment or token for a rule to match, and sending
each such run costs the engine as much as a real token.
"""

from __future__ import annotations

import binascii
from typing import NamedTuple

SHORTEST = 15  # the shortest vendor token of our rules: xoxb- and ten characters
SHORTEST_FOR_ENGINE = 16
CONTEXT_BYTES = 512  # of a line longer than this on each side of a run, the engine sees this much

_TOKEN_CHARACTERS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_.-"
_DIGITS = b"0123456789"
_HEX_AND_DASH = b"abcdefABCDEF-"
_SHAPE = bytes(ord("t") if byte in _TOKEN_CHARACTERS else ord(" ") for byte in range(256))
# Every token byte as its class: a digit `d`, another hex digit or a dash `h`, any other `t`.
_CLASS = bytes(
    ord("d" if byte in _DIGITS else "h" if byte in _HEX_AND_DASH else "t" if byte in _TOKEN_CHARACTERS else " ")
    for byte in range(256)
)
_RUN = b"t" * SHORTEST
_BASE64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_PLAIN_WORDS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz .,;!?'"
_DIGEST_PREFIXES = (b"sha256-", b"sha384-", b"sha512-")  # subresource integrity: base64 digests
_NAME_ENDS = (b":", b"=")  # a line ending so names a value that may follow on the next


class Runs(NamedTuple):
    """`tokens`: every run of SHORTEST or more characters that is no digest (hex digits and dashes
    alone, or `sha512-` and base64), one a line: where our vendor-token rules look. `snippets`:
    (start, end) byte offsets of what the engine reads, the lines that hold a token-shaped run (such
    a run of 16 or more characters with a digit and one that is no hex digit or dash, and no base64 of
    plain words), each with the
    line before it when that one ends in `:` or `=` (a name whose value follows on the next line), at
    most CONTEXT_BYTES of a long line each side of the run, cut at spaces; adjacent or overlapping
    spans merged, in order."""

    tokens: bytes
    snippets: list[tuple[int, int]]


def find_runs(data: bytes) -> Runs:
    """The runs of `data`, in one pass."""
    shape = data.translate(_SHAPE)
    classes = data.translate(_CLASS)
    tokens: list[bytes] = []
    snippets: list[tuple[int, int]] = []
    start = shape.find(_RUN)
    while start >= 0:
        end = shape.find(b" ", start)
        end = end if end >= 0 else len(data)
        if classes.find(b"t", start, end) >= 0 and not data.startswith(_DIGEST_PREFIXES, start):
            tokens.append(data[start:end])
            if end - start >= SHORTEST_FOR_ENGINE and classes.find(b"d", start, end) >= 0 and not _prose(tokens[-1]):
                if not snippets or start >= snippets[-1][1]:
                    _add_snippet(data, start, end, snippets)
        start = shape.find(_RUN, end)
    return Runs(b"\n".join(tokens), snippets)


def _prose(run: bytes) -> bool:
    """Whether a run is base64 of plain words (three or more: letters, spaces, `.,;!?'`), which holds
    no name, assignment or token for a rule to match."""
    if len(run) % 4 == 1 or run.translate(None, _BASE64):
        return False
    try:  # the padding `=` ends a run: put it back
        text = binascii.a2b_base64(run + b"=" * (-len(run) % 4), strict_mode=True)
    except binascii.Error:
        return False
    return not text.translate(None, _PLAIN_WORDS) and text.count(b" ") >= 2 and not text.startswith(b" ")


def _add_snippet(data: bytes, start: int, end: int, snippets: list[tuple[int, int]]) -> None:
    """Add the snippet around the run at data[start:end], merged with the last one it touches."""
    first = data.rfind(b"\n", 0, start) + 1
    if first:
        before = data.rfind(b"\n", 0, first - 1) + 1
        if data[before : first - 1].rstrip()[-1:] in _NAME_ENDS:
            first = before
    if start - first > CONTEXT_BYTES:
        first = start - CONTEXT_BYTES
        first = data.find(b" ", first, start) + 1 or first
    line_end = data.find(b"\n", end)
    last = line_end if line_end >= 0 else len(data)
    if last - end > CONTEXT_BYTES:
        last = end + CONTEXT_BYTES
        space = data.rfind(b" ", end, last)
        last = space if space >= 0 else last
    if snippets and first <= snippets[-1][1] + 1:
        first = snippets.pop()[0]
    snippets.append((first, last))

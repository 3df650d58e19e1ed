"""JSON a client sent, parsed with its nesting bounded: the one parser every door uses.

Python's `json` recurses once per nested array or object, so a line of `[` × 200,000 raises
`RecursionError` rather than `ValueError`, and a value nested just below the interpreter's limit
exhausts the stack of whatever walks it next (a validator, an encoder). `loads` refuses text nested
deeper than `MAX_DEPTH` before parsing it (a scan of its brackets outside strings, skipped when the
text opens fewer arrays and objects than that, and stopping at the first excess), and every
failure, that one included, is a `ValueError`. Standard
library only: the daemon's relay uses it.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from itertools import accumulate, count
from typing import Any

MAX_DEPTH = 64  # arrays and objects inside each other; the protocol's own requests use fewer than 8
TOO_DEEP = f"arrays and objects are nested more than {MAX_DEPTH} levels deep"

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_AS_SQUARE = bytes.maketrans(b"{}", b"[]")
_OPEN_TWO_CLOSE_ZERO = bytes.maketrans(b"[]", b"\x02\x00")
_CHUNK = 65536


class TooDeep(ValueError):
    """The text nests arrays and objects deeper than `MAX_DEPTH`."""

    def __init__(self) -> None:
        super().__init__(TOO_DEEP)


def too_deep(text: str | bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether `text` opens an array or object more than `limit` levels deep (outside strings).

    Text that is not JSON gets an answer too (brackets in an unterminated string count), never an
    error: it fails to parse either way."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    brackets = _STRING.sub(b"", data).translate(_AS_SQUARE, _NOT_BRACKETS)
    depth = 0  # chunk by chunk, so that deep text is refused at its first excess
    for start in range(0, len(brackets), _CHUNK):
        chunk = brackets[start : start + _CHUNK].translate(_OPEN_TWO_CLOSE_ZERO)
        # After the n-th bracket of a chunk its depth is (2 × opened so far) − n, on top of `depth`.
        if depth + max(map(operator.sub, accumulate(chunk), count(1))) > limit:
            return True
        depth += sum(chunk) - len(chunk)
    return False


def loads(text: str | bytes, *, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """`json.loads(text)`, refusing nesting deeper than `MAX_DEPTH` (`TooDeep`); raises only `ValueError`."""
    if too_deep(text):
        raise TooDeep()
    try:
        return json.loads(text, parse_constant=parse_constant)
    except RecursionError:  # a deep stack already: answered like any text nested too deeply
        raise TooDeep() from None

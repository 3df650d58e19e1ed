"""Untrusted text made safe for one line of terminal output."""

from __future__ import annotations

_LINE_BREAKS = "\n\r\t\u2028\u2029"
_BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_CONTROLS = [code for code in (*range(0x20), *range(0x7F, 0xA0)) if chr(code) not in _LINE_BREAKS]

_ONE_LINE = str.maketrans(
    {**{ch: " " for ch in _LINE_BREAKS}, **{ch: None for ch in _BIDI_CONTROLS}, **dict.fromkeys(_CONTROLS)}
)


def one_line(text: str) -> str:
    """Line breaks and tabs become spaces; bidirectional and other control characters are removed."""
    return text if text.isprintable() else text.translate(_ONE_LINE)  # each of them is unprintable

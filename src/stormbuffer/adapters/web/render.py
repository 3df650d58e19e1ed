"""Turning untrusted record text into safe HTML, and two texts into a side-by-side diff."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from markupsafe import Markup

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

    from stormbuffer.core.timestamps import Timestamp


@cache
def _markdown() -> MarkdownIt:
    """CommonMark with raw HTML escaped, images off (nothing loads from elsewhere) and the parser's
    link check, which refuses `javascript:`, `vbscript:`, `file:` and `data:` targets."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).disable("image")


def markdown(text: str) -> Markup:
    """Record text rendered as inert HTML."""
    return Markup(_markdown().render(text))  # noqa: S704 - raw HTML is escaped by the renderer


def to_second(stamp: Timestamp) -> str:
    """A time as the page shows it: RFC 3339 to the second, its offset kept."""
    head, dot, rest = stamp.render().partition(".")
    return head + rest.lstrip("0123456789") if dot else head


@dataclass(frozen=True)
class DiffRow:
    """One line of a side-by-side diff: `change` is equal, replace, delete or insert."""

    change: str
    before: str | None
    after: str | None


def side_by_side(before: str, after: str) -> list[DiffRow]:
    """The lines of `before` and `after` paired up, changed lines marked."""
    old, new = before.splitlines(), after.splitlines()
    rows = []
    for change, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        left, right = old[i1:i2], new[j1:j2]
        for index in range(max(len(left), len(right))):
            rows.append(
                DiffRow(
                    change,
                    left[index] if index < len(left) else None,
                    right[index] if index < len(right) else None,
                )
            )
    return rows

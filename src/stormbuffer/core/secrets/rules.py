"""Our layer over the engine: the rules it misses, and the values that are never secrets.

Rules (one expression per family, the value in group `v`):

- the reference's prefixed tokens with their minimum lengths, widened to every documented kind
  (GitHub, and its legacy 40-hex tokens after a `github…` name; GitLab, Slack, Stripe,
  OpenAI/Anthropic `sk-`, Google, AWS key ids, npm, PyPI, Hugging Face, SendGrid, Twilio);
- private key headers (PEM and PGP) anywhere in a line, ending it or followed by key material;
- credentials in a request: `Authorization:` anywhere in a line, `X-…-Token:`-style headers,
  `bearer=`, `curl -u user:pass`, `--password=`;
- credential URLs (`scheme://user:password@host`) and connection strings (`;Password=…`,
  `&password=…`).

Accepted values (`is_placeholder`): template references (`<…>`, `${…}`, `{{…}}`, `$NAME`),
words such as `password` or `token`, documentation markers (`example`, `redacted`, `your_`…),
and fill-ins whose longest alphanumeric run (of 12 or more), past its first four characters, uses at most three
distinct characters (`ghp_xxxx…`, `AKIAXXXX…`, `sk-AAAA…`). SHA-256/512 digests and UUIDs
are accepted where a rule reads its value from context rather than a vendor prefix (`is_digest`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache

_E = r"(?![A-Za-z0-9_-])"  # a token ends here
_VALUE = r"""["']?(?P<v>[^\s"'<>(){}\[\],;]+)"""
_HEADER_VALUE = r"""["']?(?P<v>[^\s"'<>(){}\[\],;]{8,})"""  # the reference's substantive credential

# (family, needles, expression, bounded): a rule runs only when one of its needles occurs in the
# lowercased text (a substring test is far cheaper than a search for an expression that starts
# with alternatives), and a bounded match must not follow a token character. Each expression
# starts with literal text, so that a search skips ahead to it instead of trying every position.
RULES: tuple[tuple[str, tuple[str, ...], str, bool], ...] = (
    ("github", ("gh", "github_pat_"), r"(?P<v>gh[pousr]_[A-Za-z0-9_]{16,}|github_pat_[A-Za-z0-9_]{13,})" + _E, True),
    (
        "github",
        ("github",),
        r"(?:github|GITHUB|Github)\w*[\"']?\s*[:=]\s*[\"']?(?P<v>[0-9a-f]{40})(?![0-9A-Za-z])",
        False,
    ),
    (
        "gitlab",
        ("gl", "gr1348941"),
        r"(?P<v>(?:gl(?:pat|rt|oas|ptt|cbt|imt|agent|soat|ft|ffct|dt)-|GR1348941)[A-Za-z0-9_.-]{14,})" + _E,
        True,
    ),
    (
        "slack",
        ("xox", "xapp-"),
        r"(?P<v>xox[a-z](?:\.xox[a-z])?-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,})" + _E,
        True,
    ),
    (
        "slack",
        ("hooks.slack.com",),
        r"(?P<v>https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_+-]{20,})",
        False,
    ),
    ("stripe", ("k_live_", "k_test_", "k_prod_"), r"(?P<v>[rs]k_(?:live|test|prod)_[A-Za-z0-9]{12,})" + _E, True),
    ("anthropic", ("sk-ant-",), r"(?P<v>sk-ant-[A-Za-z0-9_-]{14,})" + _E, True),
    ("openai", ("sk-",), r"(?P<v>sk-[A-Za-z0-9_-]{21,})" + _E, True),
    ("google", ("aiza",), r"(?P<v>AIza[A-Za-z0-9_-]{26,})" + _E, True),
    (
        "aws",
        ("akia", "asia", "abia", "acca", "a3t"),
        r"(?P<v>(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16})(?![A-Za-z0-9])",
        True,
    ),
    (
        "aws",
        ("aws",),
        r"(?:aws|AWS)_?(?i:secret(?:_access)?_?key)[\"']?\s*[:=]\s*[\"']?(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
        False,
    ),
    (
        "aws",
        ("secretaccesskey",),
        r"SecretAccessKey[\"']?\s*[:=]\s*[\"']?(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
        False,
    ),
    ("npm", ("npm_",), r"(?P<v>npm_[A-Za-z0-9]{36})" + _E, True),
    ("pypi", ("pypi-",), r"(?P<v>pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,})" + _E, True),
    ("huggingface", ("hf_", "api_org_"), r"(?P<v>(?:hf_|api_org_)[A-Za-z]{34})" + _E, True),
    ("sendgrid", ("sg.",), r"(?P<v>SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43})" + _E, True),
    ("twilio", ("sk",), r"(?P<v>SK[0-9a-fA-F]{32})(?![A-Za-z0-9])", True),
    (
        "twilio",
        ("twilio",),
        r"(?:twilio|TWILIO)_?(?i:\w*(?:auth|secret)\w*)[\"']?\s*[:=]\s*[\"']?(?P<v>[0-9a-f]{32})",
        False,
    ),
    ("jwt", ("eyj",), r"(?P<v>eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})" + _E, True),
    (
        "private_key",
        ("-----begin ",),
        r"(?P<v>-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)(?:[ \t]*(?:\r?\n|$)|\s*[A-Za-z0-9+/=]{16})",
        False,
    ),
    (
        "authorization",
        ("authorization",),
        r"(?:authorization|Authorization|AUTHORIZATION)[\"']?\s*[:=]\s*[\"']?"
        r"(?:(?i:bearer|basic|token|digest)\s+)?" + _HEADER_VALUE,
        False,
    ),
    (
        "authorization",
        ("x-", "private-token", "token", "api-key"),
        r"(?:X-[A-Za-z-]*(?:Token|Key|Secret|Auth)[A-Za-z-]*|PRIVATE-TOKEN|Token|Api-Key|API-Key)\s*:\s*"
        + _HEADER_VALUE,
        True,
    ),
    ("authorization", ("bearer=",), r"(?:bearer|Bearer|BEARER)=" + _HEADER_VALUE, True),
    ("authorization", ("-u", "--user", "--proxy-user"), r"-(?:u|-user|-proxy-user)\s+[\"']?[^\s:\"']+:" + _VALUE, True),
    ("authorization", ("password",), r"--(?:http-|ftp-|proxy-)?password[= ]" + _VALUE, True),
    ("credential_url", ("://",), r"://[^\s/?#@:]*:(?P<v>[^\s/?#]+)@", False),
    ("credential_url", ("password=", "pwd="), r"(?:password|Password|PASSWORD|pwd|Pwd|PWD)=(?P<v>[^;&\s\"']+)", False),
)
_TOKEN_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
# Families whose rule reads a value from its context (a header, a URL, the engine's `key = …`
# rules): the value needs this many bytes, and a SHA-256/512 digest or a UUID there is no secret.
MIN_CONTEXT_BYTES = {"authorization": 4, "credential_url": 4, "generic": 4}

_PLACEHOLDER_WORDS = frozenset(
    {"password", "passwd", "pass", "pwd", "token", "secret", "api_key", "apikey", "changeme", "bearer", "basic"}
)
_PLACEHOLDER_STARTS = ("<", "${", "{{", "$", "%", "*", "...")
_PLACEHOLDER_MARKERS = ("example", "placeholder", "redacted", "your_", "your-", "yourtoken", "dummy", "xxxx", "...")
_FILL_IN_RUN = 12
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]+")
_DIGEST = re.compile(
    r"(?:sha\d*[:-])?(?:[0-9a-fA-F]{64}|[0-9a-fA-F]{128}"
    r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
)


@cache
def _compiled() -> tuple[tuple[str, tuple[str, ...], re.Pattern[str], bool], ...]:
    return tuple((family, needles, re.compile(pattern), bounded) for family, needles, pattern, bounded in RULES)


def matches(text: str) -> Iterator[tuple[str, str]]:
    """(family, value) for every match of our rules."""
    lowered = text.lower()
    for family, needles, pattern, bounded in _compiled():
        if not any(needle in lowered for needle in needles):
            continue
        for found in pattern.finditer(text):
            start = found.start()
            if not (bounded and start and text[start - 1] in _TOKEN_CHARACTERS):
                yield family, found["v"]


def is_placeholder(value: str) -> bool:
    """A value that stands for a secret without being one."""
    value = value.strip("\"'`")
    lowered = value.lower()
    if lowered in _PLACEHOLDER_WORDS or lowered.startswith(_PLACEHOLDER_STARTS):
        return True
    if any(marker in lowered for marker in _PLACEHOLDER_MARKERS):
        return True
    runs = _ALNUM_RUN.findall(value)
    if not runs:
        return True
    longest = max(runs, key=len)
    return len(longest) >= _FILL_IN_RUN and len(set(longest[4:])) <= 3


def is_digest(value: str) -> bool:
    """A SHA-256 or SHA-512 hex digest, or a UUID (32- and 40-hex values are token shapes too)."""
    return _DIGEST.fullmatch(value) is not None


def accepted(family: str, value: str) -> bool:
    """True when a match of `family` on `value` is not a secret."""
    if is_placeholder(value):
        return True
    minimum = MIN_CONTEXT_BYTES.get(family)
    return minimum is not None and (len(value.encode()) < minimum or is_digest(value))

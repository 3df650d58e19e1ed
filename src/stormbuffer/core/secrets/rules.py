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

# (family, needles, expression, kind): a rule reads only the lines holding one of its needles in
# the lowercased text, with the line after each (a substring search is far cheaper than a search
# for an expression that starts with alternatives). Kinds: a `token` rule matches a vendor-prefixed
# token, which lies within a long token run that is not only hex digits and dashes, and looks only
# among those runs (`runs.Runs.tokens`); a `token` or `bounded` match must not follow a token
# character; an
# `anywhere` match may. Each expression starts with literal text, so that a search skips ahead to
# it instead of trying every position.
RULES: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    (
        "github",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        r"(?P<v>gh[pousr]_[A-Za-z0-9_]{16,}|github_pat_[A-Za-z0-9_]{13,})" + _E,
        "token",
    ),
    (
        "github",
        ("github",),
        r"(?:github|GITHUB|Github)\w*[\"']?\s*[:=]\s*[\"']?(?P<v>[0-9a-f]{40})(?![0-9A-Za-z])",
        "anywhere",
    ),
    (
        "gitlab",
        ("gl", "gr1348941"),
        r"(?P<v>(?:gl(?:pat|rt|oas|ptt|cbt|imt|agent|soat|ft|ffct|dt)-|GR1348941)[A-Za-z0-9_.-]{14,})" + _E,
        "token",
    ),
    (
        "slack",
        ("xox", "xapp-"),
        r"(?P<v>xox[a-z](?:\.xox[a-z])?-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,})" + _E,
        "token",
    ),
    (
        "slack",
        ("hooks.slack.com",),
        r"(?P<v>https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_+-]{20,})",
        "anywhere",
    ),
    ("stripe", ("k_live_", "k_test_", "k_prod_"), r"(?P<v>[rs]k_(?:live|test|prod)_[A-Za-z0-9]{12,})" + _E, "token"),
    ("anthropic", ("sk-ant-",), r"(?P<v>sk-ant-[A-Za-z0-9_-]{14,})" + _E, "token"),
    ("openai", ("sk-",), r"(?P<v>sk-[A-Za-z0-9_-]{21,})" + _E, "token"),
    ("google", ("aiza",), r"(?P<v>AIza[A-Za-z0-9_-]{26,})" + _E, "token"),
    (
        "aws",
        ("akia", "asia", "abia", "acca", "a3t"),
        r"(?P<v>(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16})(?![A-Za-z0-9])",
        "token",
    ),
    (
        "aws",
        ("aws",),
        r"(?:aws|AWS)_?(?i:secret(?:_access)?_?key)[\"']?\s*[:=]\s*[\"']?(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
        "anywhere",
    ),
    (
        "aws",
        ("secretaccesskey",),
        r"SecretAccessKey[\"']?\s*[:=]\s*[\"']?(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
        "anywhere",
    ),
    ("npm", ("npm_",), r"(?P<v>npm_[A-Za-z0-9]{36})" + _E, "token"),
    ("pypi", ("pypi-",), r"(?P<v>pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,})" + _E, "token"),
    ("huggingface", ("hf_", "api_org_"), r"(?P<v>(?:hf_|api_org_)[A-Za-z]{34})" + _E, "token"),
    ("sendgrid", ("sg.",), r"(?P<v>SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43})" + _E, "token"),
    ("twilio", ("sk",), r"(?P<v>SK[0-9a-fA-F]{32})(?![A-Za-z0-9])", "token"),
    (
        "twilio",
        ("twilio",),
        r"(?:twilio|TWILIO)_?(?i:\w*(?:auth|secret)\w*)[\"']?\s*[:=]\s*[\"']?(?P<v>[0-9a-f]{32})",
        "anywhere",
    ),
    ("jwt", ("eyj",), r"(?P<v>eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})" + _E, "token"),
    (
        "private_key",
        ("-----begin ",),
        r"(?P<v>-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)(?:[ \t]*(?:\r?\n|$)|\s*[A-Za-z0-9+/=]{16})",
        "anywhere",
    ),
    (
        "authorization",
        ("authorization",),
        r"(?:authorization|Authorization|AUTHORIZATION)[\"']?\s*[:=]\s*[\"']?"
        r"(?:(?i:bearer|basic|token|digest)\s+)?" + _HEADER_VALUE,
        "anywhere",
    ),
    (
        "authorization",
        ("x-", "token", "api-key"),
        r"(?:X-[A-Za-z-]*(?:Token|Key|Secret|Auth)[A-Za-z-]*|PRIVATE-TOKEN|Token|Api-Key|API-Key)\s*:\s*"
        + _HEADER_VALUE,
        "bounded",
    ),
    ("authorization", ("bearer=",), r"(?:bearer|Bearer|BEARER)=" + _HEADER_VALUE, "bounded"),
    (
        "authorization",
        ("-u",),
        r"-(?:u|-user|-proxy-user)\s+[\"']?[^\s:\"']+:" + _VALUE,
        "bounded",
    ),
    ("authorization", ("password",), r"--(?:http-|ftp-|proxy-)?password[= ]" + _VALUE, "bounded"),
    ("credential_url", ("://",), r"://[^\s/?#@:]*:(?P<v>[^\s/?#]+)@", "anywhere"),
    (
        "credential_url",
        ("password=", "pwd="),
        r"(?:password|Password|PASSWORD|pwd|Pwd|PWD)=(?P<v>[^;&\s\"']+)",
        "anywhere",
    ),
)
_TOKEN_CHARACTERS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
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
    r"|sha(?:256-[A-Za-z0-9+/]{43}=|384-[A-Za-z0-9+/]{64}|512-[A-Za-z0-9+/]{86}==)"
)


@cache
def _compiled() -> tuple[tuple[str, tuple[bytes, ...], re.Pattern[bytes], str], ...]:
    return tuple(
        (family, tuple(needle.encode() for needle in needles), re.compile(pattern.encode()), kind)
        for family, needles, pattern, kind in RULES
    )


def matches(data: bytes, tokens: bytes) -> Iterator[tuple[str, str]]:
    """(family, value) for every match of our rules in UTF-8 text, given its long token runs
    (`runs`); each rule reads only the lines that hold one of its needles, a token rule only the
    runs."""
    texts = {"token": (tokens, tokens.lower()), "": (data, data.lower())}
    for family, needles, pattern, kind in _compiled():
        text, lowered = texts["token" if kind == "token" else ""]
        for start, end in _lines_holding(lowered, needles):
            for found in pattern.finditer(text, start, end):
                at = found.start()
                if not (kind != "anywhere" and at and text[at - 1] in _TOKEN_CHARACTERS):
                    yield family, found["v"].decode("utf-8", "replace")


def _lines_holding(lowered: bytes, needles: tuple[bytes, ...]) -> list[tuple[int, int]]:
    """(start, end) of each line holding a needle, with the line after it (a header's value or a
    key's material may follow on the next line), overlapping spans merged, in order."""
    spans = []
    for needle in needles:
        position = lowered.find(needle)
        while position >= 0:
            start = lowered.rfind(b"\n", 0, position) + 1
            line_end = lowered.find(b"\n", position)
            after = lowered.find(b"\n", line_end + 1) if line_end >= 0 else -1
            spans.append((start, after + 1 if after >= 0 else len(lowered)))
            position = lowered.find(needle, line_end + 1) if line_end >= 0 else -1
    if len(needles) > 1:
        spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


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
    """A SHA-256 or SHA-512 hex digest, a subresource integrity digest (`sha384-` and base64), or a
    UUID (32- and 40-hex values are token shapes too)."""
    return _DIGEST.fullmatch(value) is not None


def accepted(family: str, value: str) -> bool:
    """True when a match of `family` on `value` is not a secret."""
    if is_placeholder(value):
        return True
    minimum = MIN_CONTEXT_BYTES.get(family)
    return minimum is not None and (len(value.encode()) < minimum or is_digest(value))

"""The secret guard: detection rules, placeholders, and field reporting."""

from __future__ import annotations

import string

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from stormbuffer.core.secrets import contains_secret, find_secret_fields

TAIL = "0123456789abcdefghijklmnop"
PREFIX_MINIMUMS = [
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
]
PLACEHOLDER_MARKERS = ("example", "placeholder", "redacted", "your_token", "your-token")


def token_of_length(prefix: str, length: int) -> str:
    filler = (TAIL * 4)[: length - len(prefix)]
    return prefix + filler


@pytest.mark.parametrize(
    "text",
    [
        "-----BEGIN RSA PRIVATE KEY-----\nmaterial",
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.signature",
        "proxy-authorization: Basic dXNlcjphLXJlYWwtcGFzc3dvcmQ=",
        *(
            f"token {prefix}{TAIL}"
            for prefix in (
                "ghp_",
                "gho_",
                "ghu_",
                "ghs_",
                "github_pat_",
                "glpat-",
                "sk_live_",
                "rk_live_",
                "sk-proj-",
                "xoxb-",
                "xoxp-",
                "xoxa-",
            )
        ),
        "token AIza0123456789abcdefghijklmnopqrstuv",
        "AWS_ACCESS_KEY_ID=AKIA0123456789ABCDEF",
        "postgres://service:correct-horse-battery@db.internal/app",
    ],
)
def test_reference_examples_are_detected(text: str) -> None:
    assert contains_secret(text)


@pytest.mark.parametrize(
    "text",
    [
        "fixed in 3f786850e387550fdab836ed7e6dc881de23001b",
        "record 0190f5c2-7a3e-7cc1-9a0e-5f3d2b1c4a99 superseded 123e4567-e89b-12d3-a456-426614174000",
        "use Authorization: Bearer ${YOUR_TOKEN}",
        "Authorization: Bearer ${YOUR_TOKEN}",
        "set token to github_pat_example_placeholder",
        "https://user:<password>@example.com/docs",
        "https://user:password@example.com/docs",
        "the sk- prefix is discussed without a credential",
    ],
)
def test_reference_examples_are_allowed(text: str) -> None:
    assert not contains_secret(text)


@pytest.mark.parametrize(("prefix", "minimum"), PREFIX_MINIMUMS)
def test_each_prefix_matches_from_its_minimum_length(prefix: str, minimum: int) -> None:
    at_minimum = token_of_length(prefix, minimum)
    below_minimum = token_of_length(prefix, minimum - 1)
    assert len(at_minimum) == minimum
    assert contains_secret(f"value {at_minimum} here")
    assert not contains_secret(f"value {below_minimum} here")


@pytest.mark.parametrize(("prefix", "minimum"), PREFIX_MINIMUMS)
def test_prefix_tail_must_be_token_characters(prefix: str, minimum: int) -> None:
    token = token_of_length(prefix, minimum + 4)
    broken = token[: minimum - 2] + "." + token[minimum - 2 :]
    assert not contains_secret(f"value {broken} here")


def test_prefixes_are_case_sensitive() -> None:
    assert not contains_secret("GHP_0123456789abcdefghijklmnop")
    assert not contains_secret("aiza0123456789abcdefghijklmnopqrstuv")


@pytest.mark.parametrize(
    "text",
    [
        "(ghp_0123456789abcdefghijklmnop)",
        "see [ghp_0123456789abcdefghijklmnop]",
        "token ghp_0123456789abcdefghijklmnop!?.",
        '{"token": "ghp_0123456789abcdefghijklmnop"}',
        "export GITHUB_TOKEN='ghp_0123456789abcdefghijklmnop';",
        "use `ghp_0123456789abcdefghijklmnop`!",
        "key=ghp_0123456789abcdefghijklmnop,next",
    ],
)
def test_tokens_are_found_inside_punctuation(text: str) -> None:
    assert contains_secret(text)


@pytest.mark.parametrize(
    "text",
    [
        "github_pat_REDACTED_0123456789abcdef",
        "ghp_your_token_goes_here_0123456789",
        "sk-proj-EXAMPLE0123456789abcdefghij",
        "xoxb-placeholder-0123456789abcdefgh",
    ],
)
def test_placeholder_tokens_are_allowed(text: str) -> None:
    assert not contains_secret(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("AWS_ACCESS_KEY_ID=AKIA0123456789ABCDEF", True),
        ("key AKIAIOSFODNN7ABCDEFG.", True),
        ("key AKIA0123456789ABCDE", False),  # 19 characters
        ("key AKIA0123456789ABCDEFG", False),  # 21 characters
        ("key AKIA0123456789abcdef", False),  # lowercase
        ("key AKIB0123456789ABCDEF", False),
    ],
)
def test_aws_access_key_ids(text: str, expected: bool) -> None:
    assert contains_secret(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgres://service:correct-horse-battery@db.internal/app", True),
        ("see redis://:s3cr3t-passw0rd@cache:6379/0 for details", True),
        ("mysql://app:'quoted-secret-1'@db?ssl=true", True),
        ("https://u:p@ss:w0rd-long@host/path", True),
        ("https://user:<password>@example.com/docs", False),
        ("https://user:password@example.com/docs", False),
        ("https://user:PASSWD@host/docs", False),
        ("https://user:${DB_PASSWORD}@host/docs", False),
        ("https://user:{{db_password}}@host/docs", False),
        ("https://user:xxxxxxxx@host/docs", False),
        ("https://user:********@host/docs", False),
        ("https://user:your-password@host/docs", False),
        ("https://user:short@host/docs", False),
        ("https://user@host/docs", False),
        ("https://host/docs?redirect=user:longpassword@other", False),
        ("https://host/path#frag:longpassword@x", False),
        ("ssh://git@github.com/org/repo.git", False),
    ],
)
def test_credential_urls(text: str, expected: bool) -> None:
    assert contains_secret(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("curl https://host/api?x=1 bearer=s3cr3t-value-123", True),
        ("BEARER=s3cr3t-value-123", True),
        ("Bearer=s3cr3t-value-123 trailing", True),
        ("bearer=${API_TOKEN}", False),
        ("bearer=short", False),
        ("bearer=", False),
        ("bearer=xxxxxxxxxxxx", False),
        ("mybearer=s3cr3t-value-123", False),
    ],
)
def test_bearer_equals_words(text: str, expected: bool) -> None:
    assert contains_secret(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: s3cr3t-value-123", True),
        ("  AUTHORIZATION:   Basic   dXNlcjpzM2NyM3Q=  ", True),
        ("Proxy-Authorization: Bearer abcdefgh12345", True),
        ('Authorization: Bearer "abcdefgh12345"', True),
        ("Authorization : Bearer abcdefgh12345", False),
        ("use Authorization: Bearer abcdefgh12345", False),
        ("Authorization: Bearer", False),
        ("Authorization: Bearer <token>", False),
        ("Authorization: Bearer {{token}}", False),
        ("Authorization: Bearer ********", False),
        ("Authorization: Bearer short", False),
        ("Authorization: token", False),
        ("Authorization: Bearer your_token_here", False),
        ("X-Authorization: Bearer abcdefgh12345", False),
    ],
)
def test_authorization_headers(text: str, expected: bool) -> None:
    assert contains_secret(text) is expected


@pytest.mark.parametrize(
    "header",
    [
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----BEGIN EC PRIVATE KEY-----",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "-----BEGIN ENCRYPTED PRIVATE KEY-----",
        "-----BEGIN PRIVATE KEY-----",
        "   -----BEGIN DSA PRIVATE KEY-----   ",
    ],
)
def test_pem_private_keys(header: str) -> None:
    assert contains_secret(f"key follows\n{header}\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----")


@pytest.mark.parametrize(
    "text",
    [
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A",
        "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkq",
        "the header -----BEGIN RSA PRIVATE KEY----- marks a key file",
    ],
)
def test_pem_lookalikes_are_allowed(text: str) -> None:
    assert not contains_secret(text)


@pytest.mark.parametrize(
    "text",
    [
        "notes\r\n-----BEGIN OPENSSH PRIVATE KEY-----\r\nb3BlbnNzaC1rZXktdjEA\r\n",
        "GET / HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig\r\n\r\n",
        "first\r\ntoken ghp_0123456789abcdefghijklmnop\r\n",
        "url\r\npostgres://svc:correct-horse-battery@db/app\r\n",
    ],
)
def test_crlf_text_is_scanned(text: str) -> None:
    assert contains_secret(text)


def test_crlf_text_without_secrets_is_allowed() -> None:
    assert not contains_secret("Authorization: Bearer ${TOKEN}\r\nplain notes\r\n")


def test_find_secret_fields_names_fields_without_values() -> None:
    token = "ghp_0123456789abcdefghijklmnop"
    fields = [
        ("title", "Deploy notes"),
        ("body", "Run the deploy script."),
        ("tags[0]", "ops"),
        ("sources[0].reference", "https://git.example/ops/deploy"),
        ("sources[0].revision", token),
        ("sources[0].content_hash", "3f786850e387550fdab836ed7e6dc881de23001b"),
    ]
    found = find_secret_fields(fields)
    assert found == ["sources[0].revision"]
    assert all(token not in name for name in found)


def test_find_secret_fields_keeps_order_and_reports_each_name_once() -> None:
    fields = [
        ("body", "Authorization: Bearer abcdefgh12345"),
        ("aliases", "safe"),
        ("tags", "AKIA0123456789ABCDEF"),
        ("body", "postgres://u:correct-horse-battery@db/app"),
        ("title", "-----BEGIN PRIVATE KEY-----"),
    ]
    assert find_secret_fields(fields) == ["body", "tags", "title"]


def test_find_secret_fields_on_clean_fields() -> None:
    assert find_secret_fields([]) == []
    assert find_secret_fields([("title", "Use the sk- prefix docs"), ("body", "nothing here")]) == []


lowercase_words = st.lists(st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=24), max_size=60)


@given(lowercase_words)
def test_lowercase_prose_never_triggers(words: list[str]) -> None:
    assert not contains_secret(" ".join(words))


@given(
    before=st.text(max_size=80),
    tail=st.text(alphabet=string.ascii_letters + string.digits, min_size=20, max_size=60),
    after=st.text(max_size=80),
)
def test_embedded_github_token_always_triggers(before: str, tail: str, after: str) -> None:
    assume(not any(marker in tail.lower() for marker in PLACEHOLDER_MARKERS))
    assert contains_secret(f"{before} ghp_{tail} {after}")

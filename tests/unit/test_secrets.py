"""The secret guard: the labelled set's per-family targets, the reference's examples, placeholders,
field reporting, engine windows, and a scan that opens no socket."""

from __future__ import annotations

import json
import string
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from stormbuffer.core.secrets import contains_secret, engine, find_secret_fields, normalized, secret_families
from stormbuffer.core.secrets.runs import find_runs
from tests.system import program

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "secrets"
TARGET_RECALL = 0.97
TARGET_FALSE_POSITIVES = 0.01


def labelled(name: str) -> list[dict[str, str]]:
    with (FIXTURES / f"{name}.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


POSITIVES = labelled("positives")
NEGATIVES = labelled("negatives")


@pytest.mark.parametrize("family", sorted({row["family"] for row in POSITIVES}))
def test_each_family_meets_the_recall_target(family: str) -> None:
    rows = [row["text"] for row in POSITIVES if row["family"] == family]
    missed = [text for text in rows if not contains_secret(text)]
    assert 1 - len(missed) / len(rows) >= TARGET_RECALL, f"{len(missed)} of {len(rows)} missed"


def test_negatives_meet_the_false_positive_target() -> None:
    refused = Counter(row["family"] for row in NEGATIVES if contains_secret(row["text"]))
    assert sum(refused.values()) / len(NEGATIVES) <= TARGET_FALSE_POSITIVES, refused


@pytest.mark.parametrize(
    ("text", "family"),
    [
        ("-----BEGIN RSA PRIVATE KEY-----\nmaterial", "private_key"),
        ('{"key": "-----BEGIN PGP PRIVATE KEY BLOCK-----\\nlQOYBGXyz0123456789abcdefABCDEF"}', "private_key"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.signature", "authorization"),
        ("proxy-authorization: Basic dXNlcjphLXJlYWwtcGFzc3dvcmQ=", "authorization"),
        ('curl -H "Authorization: token 9f8e7d6c5b4a39281706" https://api.github.com', "authorization"),
        ("curl -u deploy:hunter22 https://ci.lan", "authorization"),
        ("call it with bearer=Zk29xLq81mWp", "authorization"),
        ("token ghr_0123456789abcdefghijklmnop", "github"),
        ("token github_pat_A1b2C3d4E5f6G7h8J9k0LmNoPq", "github"),
        ("<id>glcbt-0123456789abcdefghij</id>", "gitlab"),
        ("token sk_test_0123456789abcdefghij", "stripe"),
        ("token AIza0123456789abcdefghijklmnopqrstuv", "google"),
        ("AWS_ACCESS_KEY_ID=ASIA0123456789ABCDEF", "aws"),
        ("postgres://service:correct-horse-battery@db.internal/app", "credential_url"),
        ("Server=db;User Id=sa;Password=Tr0ub4dor;", "credential_url"),
        ("NPM_TOKEN=npm_0123456789abcdefghijABCDEFGHIJ012345", "npm"),
    ],
)
def test_examples_are_detected_with_their_family(text: str, family: str) -> None:
    assert contains_secret(text)
    assert family in secret_families(text)


@pytest.mark.parametrize(
    "text",
    [
        "fixed in 3f786850e387550fdab836ed7e6dc881de23001b",
        "record 0190f5c2-7a3e-7cc1-9a0e-5f3d2b1c4a99 superseded 123e4567-e89b-12d3-a456-426614174000",
        "Authorization: Bearer ${YOUR_TOKEN}",
        "Authorization: Bearer <token>",
        "set token to github_pat_example_placeholder",
        "https://user:<password>@example.com/docs",
        "https://user:password@example.com/docs",
        "the sk- prefix is discussed without a credential",
        "the header -----BEGIN RSA PRIVATE KEY----- marks a key file",
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A",
        "ghp_" + "x" * 36,
        "glpat-xxxxxxxxxxxxxxxxxxxx",
        "xoxb-xxxx-xxxx-xxxx",
        "AKIAXXXXXXXXXXXXXXXX",
        "AKIAIOSFODNN7EXAMPLE",
        "sk-" + "A" * 48,
        "cache key: " + "ab12" * 16,
        '<script integrity="sha384-oqVuAfXRKap7fdgcCY5uykM6+R9GqQ8K/uxy9rx7HNQlGYl1kPzQho1wx4JwY8wC"></script>',
        "Authorization: sha512-" + "Zm9v" * 21 + "YQ==",
    ],
)
def test_placeholders_hashes_and_prose_are_allowed(text: str) -> None:
    assert not contains_secret(text)
    assert secret_families(text) == []


@pytest.mark.parametrize(
    "text",
    [
        "notes\r\n-----BEGIN OPENSSH PRIVATE KEY-----\r\nb3BlbnNzaC1rZXktdjEA\r\n",
        "GET / HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig\r\n\r\n",
        "first\r\ntoken ghp_0123456789abcdefghijklmnop\r\n",
    ],
)
def test_crlf_text_is_scanned(text: str) -> None:
    assert contains_secret(text)


def test_find_secret_fields_names_fields_once_in_order_without_values() -> None:
    token = "ghp_0123456789abcdefghijklmnop"
    fields = [
        ("title", "Deploy notes"),
        ("body", "Authorization: Bearer abcdefgh12345"),
        ("sources[0].revision", token),
        ("body", "postgres://u:correct-horse-battery@db/app"),
        ("sources[0].content_hash", "3f786850e387550fdab836ed7e6dc881de23001b"),
    ]
    assert find_secret_fields(fields) == ["body", "sources[0].revision"]
    assert find_secret_fields([("title", "Use the sk- prefix docs"), ("body", "nothing here")]) == []


def sent_to_engine(text: str) -> list[str]:
    """The batches the engine reads of `text`, hex runs masked."""
    data = normalized(text)
    return [batch.decode() for batch in engine.batches(data, find_runs(data).snippets)]


def test_the_engine_reads_only_the_lines_around_token_shaped_runs_of_a_long_text() -> None:
    token = "DATABRICKS_TOKEN=dapi0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d"
    filler = [f"line {index} of plain words, a hash 3f786850e387550fdab836ed7e6dc881de23001b" for index in range(60)]
    text = "\n".join([*filler, "databricks:", "  dapi9f8e7d6c5b4a39281706f5e4d3c2b1a0", *filler, token, *filler])
    sent = "\n".join(sent_to_engine(text))
    assert token in sent and "databricks:\n  dapi9f8e7d6c5b4a39281706f5e4d3c2b1a0" in sent
    assert "plain words" not in sent
    assert secret_families(text) == ["databricks"]


def test_hex_runs_are_masked_from_the_engine() -> None:
    """A UUID-shaped Heroku key is no token-shaped run: alone it is never sent, and beside another
    token it is masked, so that the outcome does not depend on what else the text holds."""
    text = (
        "heroku_api_key = 0190f5c2-7a3e-4cc1-9a0e-5f3d2b1c4a99\nDATABRICKS_TOKEN=dapi0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d"
    )
    assert secret_families(text) == ["databricks"]
    assert secret_families(text.partition("\n")[0]) == []


def test_a_short_text_with_a_token_shaped_run_is_sent_whole() -> None:
    text = "notes\nTOKEN=dapi0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d\nmore notes"
    assert sent_to_engine(text) == [text]
    assert sent_to_engine("plain notes, a commit 3f786850e387550fdab836ed7e6dc881de23001b") == []


def test_a_long_line_is_sent_only_around_its_token_shaped_run() -> None:
    words = [f"word{index}" for index in range(4000)]
    words[2000] = "dapi0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d"
    (sent,) = sent_to_engine(" ".join(words))
    assert words[2000] in sent and len(sent) < 2 * 512 + 64
    assert set(sent.split()) <= set(words)


def test_base64_of_plain_words_is_not_sent_to_the_engine_but_encoded_names_and_values_are() -> None:
    import base64

    def encoded(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    prose = [encoded("the deploy failed slowly because the cache was cold."), encoded("index rebuilt overnight.")]
    assert prose[0].endswith("==") and not prose[1].endswith("=")  # the padding `=` ends a run
    assert all(any(character.isdigit() for character in run) for run in prose)  # token-shaped runs
    kept = [
        encoded("password: hunter2 and more words"),  # an assignment
        encoded("user:correct-horse-battery-staple"),  # Basic credentials
        encoded('{"type": "service_account", "private_key_id": "1a2b3c"}'),  # a key file
        encoded("deploy with token 0a1b2c3d4e5f6a7b8c9d"),  # a digit: no plain words
    ]
    filler = ["plain notes about the deploy"] * 60
    sent = "\n".join(sent_to_engine("\n".join([*filler, *prose, *filler, *kept, *filler])))
    assert not any(run.rstrip("=") in sent for run in prose)
    assert all(run.rstrip("=") in sent for run in kept)


def test_a_secret_deep_in_a_64_kib_body_is_found_by_the_engine() -> None:
    """Our rules have no Databricks rule; the engine does, in whichever window the token lands."""
    token = "dapi" + "0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d"
    text = "\n".join(["plain notes about the deploy"] * 1500 + [f"DATABRICKS_TOKEN={token}"] + ["more"] * 500)
    assert len(text) > 45_000 and secret_families(text) == ["databricks"]


NO_SOCKET = """
import sys
from stormbuffer.core.secrets import secret_families
texts = [text for text in sys.stdin.read().split("\\0") if text]
print(sum(bool(secret_families(text)) for text in texts))
"""


def traced(code: str, stdin: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run `code` in a fresh interpreter under strace; the socket and connect calls of every thread
    (the engine's native code included, which Python's audit hooks cannot see)."""
    log = tmp_path / "strace.log"
    command = [program("strace"), "-f", "-qq", "-e", "trace=socket,connect", "-e", "signal=none", "-o", str(log)]
    done = subprocess.run(
        [*command, sys.executable, "-c", code], input=stdin, capture_output=True, text=True, check=False
    )
    return done, log.read_text(encoding="utf-8").splitlines()


def test_a_scan_opens_no_socket(tmp_path: Path) -> None:
    """Every positive through the engine and our rules, traced at the system-call level."""
    texts = [row["text"] for row in POSITIVES]
    done, calls = traced(NO_SOCKET, "\0".join(texts), tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert int(done.stdout) >= TARGET_RECALL * len(texts)
    assert calls == []


def test_the_trace_would_show_a_socket(tmp_path: Path) -> None:
    done, calls = traced("import socket\nsocket.socket().close()", "", tmp_path)
    assert done.returncode == 0 and any("socket(AF_INET" in call for call in calls)


lowercase_words = st.lists(st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=24), max_size=60)


@given(lowercase_words)
def test_lowercase_prose_never_triggers(words: list[str]) -> None:
    assert not contains_secret(" ".join(words))


@given(
    before=st.text(alphabet=string.printable, max_size=80),
    tail=st.text(alphabet=string.ascii_letters + string.digits, min_size=36, max_size=36),
    after=st.text(alphabet=string.printable, max_size=80),
)
def test_embedded_github_token_always_triggers(before: str, tail: str, after: str) -> None:
    assume(len(set(tail[4:])) > 3 and not any(marker in tail.lower() for marker in ("example", "xxxx", "dummy")))
    assert contains_secret(f"{before} ghp_{tail} {after}")


@pytest.mark.parametrize("before", ["notes\0", "notes \ud800 "])
def test_nul_characters_and_lone_surrogates_neither_hide_a_secret_nor_fail(before: str) -> None:
    """The engine reads a C string (a NUL would end it) encoded as UTF-8 (a lone surrogate cannot be)."""
    text = before + "DATABRICKS_TOKEN=dapi0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d"
    assert secret_families(text) == ["databricks"]

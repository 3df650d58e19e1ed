"""Fuzzing every operation: whatever arrives, exactly one valid envelope comes back.

Requests are arbitrary JSON (wrong types, nulls, huge and non-ASCII strings, nested junk, path-like
keys, secrets), near-valid requests, and raw bytes (two objects, binary, truncated text, arrays and
objects nested up to and far past the nesting bound). For each:
the envelope validates against schema/v1, no traceback, host path or planted secret appears in it,
and the canonical files change only when a write reports success. Many cases run through `handle`
in this process; fewer through real `sbuf invoke` processes, which also check the single line, the
empty stderr and the exit status.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stormbuffer.protocol.invoke import OPERATIONS, encode, handle, validate_envelope
from stormbuffer.protocol.jsontext import MAX_DEPTH
from tests.helpers import SBUF, tree_digest
from tests.protocol.conftest import BACKUP_ID, CANDIDATE_ID, LOCKFILE_ID, PROJECT_SCOPE, Store, make_store

SECRET = "ghp_Fz9Qw8Er7Ty6Ui5Op4As3Df2"
INTERESTING = [
    "",
    " ",
    "global",
    PROJECT_SCOPE,
    "project:other",
    "agent",
    "human",
    "fact",
    "checkpoint",
    "candidate",
    "active",
    LOCKFILE_ID,
    BACKUP_ID,
    CANDIDATE_ID,
    LOCKFILE_ID.upper(),
    "00000000-0000-0000-0000-000000000000",
    "2026-03-14T09:30:00-05:00",
    "2026-13-40T99:99:99Z",
    "/etc/passwd",
    "../../.sbuf/store.toml",
    "tar archive",
    "inference://guess",
    f"token {SECRET}",
    "x" * 70_000,
    "é" * 40_000,
    "\u202e\u2028\x00\x1b[31m",
    "🙂" * 600,
]
KEYS = [
    "version",
    "operation",
    "query",
    "limit",
    "budget",
    "scope",
    "scopes",
    "access",
    "id",
    "actor",
    "approved",
    "title",
    "kind",
    "body",
    "tags",
    "aliases",
    "source",
    "sources",
    "record",
    "replacement",
    "status",
    "created_at",
    "updated_at",
    "supersedes",
    "path",
    "file_path",
    "profile",
    "root",
    "store",
    "zzz",
    "",
]
SOURCE = {"kind": "conversation", "reference": "fuzz", "actor": "agent"}

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | st.sampled_from(INTERESTING)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=16,
)
near_valid = st.fixed_dictionaries(
    {"version": st.sampled_from([1, 1, 1, 2, "1", None])},
    optional={
        "query": st.sampled_from(["tar archive", "lockfile", "   ", f"find {SECRET}"]) | values,
        "limit": st.integers(-5, 500) | values,
        "budget": st.integers(-5, 5000) | values,
        "scope": st.sampled_from(["global", PROJECT_SCOPE, "project:other"]) | values,
        "scopes": st.lists(st.sampled_from(["global", PROJECT_SCOPE, "bad scope"]), max_size=3) | values,
        "access": st.sampled_from(["agent", "human"]) | values,
        "id": st.sampled_from([LOCKFILE_ID, BACKUP_ID, CANDIDATE_ID]) | values,
        "title": st.sampled_from(["Fuzzed memory", f"Key {SECRET}"]) | values,
        "kind": st.sampled_from(["fact", "decision"]) | values,
        "body": st.sampled_from(["Fuzzed body."]) | values,
        "tags": st.lists(st.text(min_size=1, max_size=5), max_size=3) | values,
        "source": st.just(SOURCE) | values,
        "sources": st.just([SOURCE]) | values,
        "actor": st.sampled_from(["agent", "human"]) | values,
        "path": values,
        "zzz": values,
    },
)
requests = near_valid | values


def nested(depth: int, opener: str, inside: str) -> bytes:
    """A request whose `query` nests `depth` arrays or objects (closed, or cut off as a stream may be)."""
    closer = "]" if opener == "[" else "}"
    return ('{"version": 1, "query": ' + opener * depth + inside + closer * depth + "}").encode()


deeply_nested = st.builds(
    nested,
    st.integers(1, MAX_DEPTH + 2) | st.integers(MAX_DEPTH, 120_000),
    st.sampled_from(["[", '{"a": ']),
    st.sampled_from(["1", "", '"tar archive"']),
)
raw_inputs = st.one_of(
    st.binary(max_size=200),
    deeply_nested,
    st.integers(MAX_DEPTH, 200_000).map(lambda depth: b"[" * depth),
    requests.map(lambda value: json.dumps(value).encode() + b" {}"),
    requests.map(lambda value: json.dumps(value).encode()[:-1]),
    requests.map(lambda value: json.dumps(value, ensure_ascii=False).encode("utf-16")),
)


def canonical_files(store: Store) -> dict[str, str]:
    """Digest of the canonical store (records and store.toml); the disposable projection is left out."""
    sbuf = store.cwd / ".sbuf"
    files = tree_digest(sbuf / "records")
    files["store.toml"] = tree_digest(sbuf)["store.toml"]
    return files


def wrote(operation: str, envelope: dict[str, Any]) -> bool:
    result = envelope.get("result")
    return (
        bool(envelope["ok"])
        and isinstance(result, dict)
        and result.get("outcome") in ("requires_approval", "possible_overlap", "accepted")
        and operation not in ("search", "context", "get")
    )


def check(store: Store, operation: str, envelope: dict[str, Any], before: dict[str, str]) -> None:
    assert validate_envelope(envelope) == [], envelope
    assert envelope["operation"] == operation
    if isinstance(envelope.get("result"), dict) and "receipt" in envelope["result"]:
        envelope = json.loads(json.dumps(envelope))
        del envelope["result"]["receipt"]["query"]  # the receipt repeats the query by contract
    text = encode(envelope)
    assert "Traceback" not in text and str(store.base) not in text and "/etc/passwd" not in text
    assert SECRET not in text
    if not wrote(operation, envelope):
        assert canonical_files(store) == before


@pytest.fixture(scope="module")
def fuzz_store() -> Iterator[Store]:
    """One contract-store copy for a whole module (Hypothesis reuses it across examples)."""
    base = Path(tempfile.mkdtemp(prefix="stormbuffer-fuzz-"))
    try:
        yield make_store(base)
    finally:
        shutil.rmtree(base)


FUZZ = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@pytest.mark.parametrize("operation", OPERATIONS)
@FUZZ
@given(request=requests)
def test_handle_answers_every_json_request(fuzz_store: Store, operation: str, request: Any) -> None:
    before = canonical_files(fuzz_store)
    check(
        fuzz_store,
        operation,
        handle(operation, request if isinstance(request, dict) else json.dumps(request).encode(), fuzz_store.session()),
        before,
    )


@pytest.mark.parametrize("operation", [*OPERATIONS, "forget"])
@FUZZ
@given(data=raw_inputs)
def test_handle_answers_every_byte_string(fuzz_store: Store, operation: str, data: bytes) -> None:
    before = canonical_files(fuzz_store)
    check(fuzz_store, operation, handle(operation, data, fuzz_store.session()), before)


@pytest.mark.parametrize("operation", OPERATIONS)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=raw_inputs | requests.map(lambda value: json.dumps(value).encode()))
def test_sbuf_invoke_process_answers_everything(fuzz_store: Store, operation: str, data: bytes) -> None:
    before = canonical_files(fuzz_store)
    completed = subprocess.run(
        [str(SBUF), "--project", "invoke", operation],
        input=data,
        capture_output=True,
        cwd=fuzz_store.cwd,
        env=fuzz_store.env,
        check=False,
    )
    assert completed.stderr == b""
    assert completed.stdout.endswith(b"\n") and completed.stdout.count(b"\n") == 1
    envelope = json.loads(completed.stdout)
    assert completed.returncode == (0 if envelope["ok"] else 1)
    check(fuzz_store, operation, envelope, before)


def test_oversized_input_is_refused_before_parsing(fuzz_store: Store) -> None:
    before = canonical_files(fuzz_store)
    data = json.dumps({"version": 1, "query": "x" * 300_000}).encode()
    completed = subprocess.run(
        [str(SBUF), "--project", "invoke", "search"],
        input=data,
        capture_output=True,
        cwd=fuzz_store.cwd,
        env=fuzz_store.env,
        check=False,
    )
    assert completed.returncode == 1 and completed.stderr == b""
    assert json.loads(completed.stdout)["error"] == {
        "code": "input_too_large",
        "message": "request exceeds the bounded input limit",
    }
    assert canonical_files(fuzz_store) == before


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 900, 200_000])
def test_nesting_past_the_bound_is_invalid_json_like_any_parse_error(
    fuzz_store: Store, operation: str, depth: int
) -> None:
    envelope = handle(operation, nested(depth, "[", "1"), fuzz_store.session())
    assert envelope["error"] == {"code": "invalid_json", "message": "stdin must contain one JSON object"}

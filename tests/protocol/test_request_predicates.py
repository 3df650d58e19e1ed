"""The compiled request predicates judge every request exactly as the jsonschema validator does.

Instances come from each bundled request schema (conforming ones, with bounds and patterns at
their edges), from fuzzing those (a value replaced by junk, a key dropped or added, a string or
number nudged across a bound) and from the protocol examples. For each, `predicates.accepts`
must agree with `schemas.validator(name).is_valid`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stormbuffer.protocol import predicates, schemas
from stormbuffer.protocol.errors import ProtocolError
from stormbuffer.protocol.requests import check_schema

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "schema" / "v1" / "examples").glob("*/*.json"))
REQUESTS = [name for name in schemas.names() if name.endswith(".request")]
BASE_URI = "https://stormbuffer.dev/schema/v1/"
RECORD_ID = "0194d2a1-2222-7a02-8a02-000000000002"
SOURCE = {"kind": "url", "reference": "https://example.test/a", "actor": "user"}


def judged_alike(name: str, instance: object) -> bool:
    """Whether the predicate and jsonschema agree; returns jsonschema's verdict."""
    expected = schemas.validator(name).is_valid(instance)
    assert predicates.accepts(name, instance) is expected, (name, instance)
    return expected


# ---------------------------------------------------------------- strategies from a bundled schema

junk_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.sampled_from([0.0, 1.0, -1.0, 2.0, 1e300, float("nan")]),
    st.text(max_size=12),
    st.sampled_from(["", " ", "global", "global\n", "agent", "human", "fact", RECORD_ID, RECORD_ID + "\n"]),
    st.from_regex(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,12})?([Zz]|[+-]\d{2}:\d{2})", fullmatch=True),
)
junk = st.recursive(
    junk_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
timestamps = st.builds(
    lambda moment, fraction, offset: moment.isoformat(timespec="seconds") + fraction + offset,
    st.datetimes(),
    st.sampled_from(["", ".5", ".000000001", ".123456789"]),
    st.sampled_from(["Z", "z", "+00:00", "-05:00", "+23:59"]),
)


@cache
def requests(name: str) -> st.SearchStrategy[Any]:
    """Requests valid against the schema `name`, drawn from its bundled form (every `$ref` inlined)."""
    return conforming(schemas.bundled(name))


def conforming(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid against one node of a bundled request schema."""
    if "const" in node:
        return st.just(node["const"])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kind = node.get("type")
    if kind is None:
        return junk
    if kind == "integer":
        return st.integers(min_value=node.get("minimum"), max_value=2**70)
    if kind == "string":
        return _strings(node)
    if kind == "array":
        items = conforming(node["items"])
        low, high = node.get("minItems", 0), node.get("maxItems", 6)
        edge = st.builds(lambda item, size: [item] * size, items, st.sampled_from([low, high]))
        return st.lists(items, min_size=low, max_size=min(high, 3)) | edge
    assert kind == "object", node
    properties = node.get("properties", {})
    required = set(node.get("required", []))
    drafts = st.fixed_dictionaries(
        {key: conforming(properties[key]) for key in properties if key in required},
        optional={key: conforming(schema) for key, schema in properties.items() if key not in required},
    )
    excluded = node.get("not", {}).get("required", [])
    return drafts.map(lambda draft: _without_excluded(draft, excluded))


def _strings(node: dict[str, Any]) -> st.SearchStrategy[str]:
    if "pattern" in node:  # may end in a newline, which Python's `$` still matches
        return st.from_regex(node["pattern"])
    if node.get("format") == "date-time":
        return timestamps
    low, high = node.get("minLength", 0), node.get("maxLength", 20)
    return st.text(min_size=low, max_size=min(high, 20)) | st.sampled_from([low, high]).map(lambda size: "é" * size)


def _without_excluded(draft: dict[str, Any], excluded: list[str]) -> dict[str, Any]:
    if excluded and all(key in draft for key in excluded):
        del draft[excluded[-1]]
    return draft


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_paths(item, (*path, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_paths(item, (*path, index)))
    return found


def _nudged(value: Any) -> list[Any]:
    """Values just across the edges a schema draws around `value`."""
    if isinstance(value, bool):
        return [int(value), not value]
    if isinstance(value, int):
        return [value - 1, value + 1, -1, float(value), str(value), bool(value)]
    if isinstance(value, str):
        return [value + "\n", value + "x", "", value.upper(), value * 2, value[:-1], " " + value]
    if isinstance(value, list):
        return [[], value + value * 16, [*value, None], tuple(value)]
    if isinstance(value, dict):
        return [{}, list(value), {**value, "path": "x"}, {**value, "zzz": 1}]
    return [value]


@st.composite
def fuzzed(draw: st.DrawFn, name: str) -> Any:
    """A conforming request with one to three parts replaced, dropped, added or nudged."""
    instance = draw(requests(name))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(instance)))
        current = instance
        for step in path:
            current = current[step]
        replacement = draw(junk | st.sampled_from(_nudged(current)))
        if not path:
            instance = replacement
            continue
        parent = instance
        for step in path[:-1]:
            parent = parent[step]
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = replacement
        if isinstance(parent, dict) and draw(st.booleans()):
            parent[draw(st.sampled_from(["scope", "scopes", "path", "id", "zzz"]) | st.text(max_size=4))] = draw(junk)
    return instance


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize("name", REQUESTS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_conforming_requests_are_accepted_by_both(name: str, data: st.DataObject) -> None:
    instance = data.draw(requests(name))
    assert judged_alike(name, instance), instance


@pytest.mark.parametrize("name", REQUESTS)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_fuzzed_requests_are_judged_alike(name: str, data: st.DataObject) -> None:
    judged_alike(name, data.draw(fuzzed(name)))


@pytest.mark.parametrize("name", REQUESTS)
@settings(max_examples=40, deadline=None)
@given(instance=junk)
def test_arbitrary_json_is_judged_alike(name: str, instance: Any) -> None:
    judged_alike(name, instance)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_examples_are_judged_alike(path: Path) -> None:
    example = json.loads(path.read_text(encoding="utf-8"))
    assert judged_alike(f"{path.parent.name}.request", example["request"]) is example.get("request_valid", True)


SEARCH = {"version": 1, "query": "tar"}
PROPOSE = {"version": 1, "record": {"title": "T", "kind": "fact", "body": "B", "sources": [SOURCE]}}
EDGES = [
    ("search.request", SEARCH, True),
    ("search.request", {**SEARCH, "version": 1.0}, False),  # integers are strict
    ("search.request", {**SEARCH, "limit": 2.0}, False),
    ("search.request", {**SEARCH, "limit": True}, False),
    ("search.request", {**SEARCH, "limit": -1}, False),
    ("search.request", {**SEARCH, "limit": 2**80}, True),
    ("search.request", {**SEARCH, "query": "🙂" * 2048}, True),  # lengths count code points
    ("search.request", {**SEARCH, "query": "🙂" * 2049}, False),
    ("search.request", {**SEARCH, "scope": "global", "scopes": ["global"]}, False),
    ("search.request", {**SEARCH, "scopes": ["global"] * 16}, True),
    ("search.request", {**SEARCH, "scopes": ["global"] * 17}, False),
    ("search.request", {**SEARCH, "access": "Agent"}, False),
    ("search.request", {**SEARCH, "operation": "search"}, True),
    ("search.request", {**SEARCH, "operation": "get"}, False),
    ("search.request", [SEARCH], False),
    ("get.request", {"version": 1, "id": RECORD_ID}, True),
    ("get.request", {"version": 1, "id": RECORD_ID + "\n"}, True),  # Python's `$` matches before a final newline
    ("get.request", {"version": 1, "id": RECORD_ID + "\n\n"}, False),
    ("get.request", {"version": 1, "id": "{" + RECORD_ID.upper() + "}"}, True),
    ("get.request", {"version": 1, "id": " " + RECORD_ID}, False),
    ("remember.request", {"version": 1, "title": "T", "kind": "fact", "body": "B", "scope": "global\n"}, True),
    ("remember.request", {"version": 1, "title": "T", "kind": "fact", "body": "B", "scope": "project:a b"}, False),
    ("remember.request", {"version": 1, "title": "T", "kind": "fact", "body": "B", "approved": {"any": [1]}}, True),
    ("remember.request", {"version": 1, "title": "T", "kind": "fact", "body": "B", "source": {}}, False),
    ("propose.request", PROPOSE, True),
    ("propose.request", {**PROPOSE, "record": {**PROPOSE["record"], "created_at": "2026-03-14T09:30:00-05:00"}}, True),
    ("propose.request", {**PROPOSE, "record": {**PROPOSE["record"], "created_at": "2026-02-30T09:30:00Z"}}, False),
    ("propose.request", {**PROPOSE, "record": {**PROPOSE["record"], "created_at": "2026-03-14T09:30:00"}}, False),
    ("propose.request", {**PROPOSE, "updated_at": "٢٠٢٦-03-14T09:30:00Z"}, True),  # as `Timestamp.parse` reads it
    ("propose.request", {**PROPOSE, "sources": [{**SOURCE, "observed_at": 5}]}, False),
    ("propose.request", {**PROPOSE, "sources": [{**SOURCE, "observed_at": "2026-03-14T09:30:00.1234567891Z"}]}, False),
    ("propose.request", {**PROPOSE, "sources": [SOURCE] * 33}, False),
    ("propose.request", {**PROPOSE, "tags": ["t"] * 128, "supersedes": [RECORD_ID, RECORD_ID.replace("-", "")]}, True),
    ("propose.request", {**PROPOSE, "supersedes": [42]}, False),
    ("supersede.request", {"version": 1, "id": RECORD_ID, "replacement": {"status": "archived"}}, True),
    ("supersede.request", {"version": 1, "id": RECORD_ID, "replacement": {"status": "gone"}}, False),
]


@pytest.mark.parametrize(("name", "instance", "expected"), EDGES)
def test_edges_are_judged_alike(name: str, instance: Any, expected: bool) -> None:
    assert judged_alike(name, instance) is expected


# ---------------------------------------------------------------- compiling


def test_keywords_outside_the_compiled_set_are_refused() -> None:
    base = {"$id": f"{BASE_URI}example.schema.json"}
    for schema in (
        {"type": "array", "uniqueItems": True},
        {"oneOf": [{"type": "string"}]},
        {"type": ["string", "null"]},
        {"type": "string", "format": "uuid"},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"enum": [1, True]},
        {"properties": {"x": {"$id": "other.schema.json"}}},
        {"items": True},
    ):
        with pytest.raises(predicates.UnsupportedSchema):
            predicates.compile_schema({**base, **schema})


def test_refs_resolve_across_files_and_within_one() -> None:
    check = predicates.compile_schema(
        {
            "$id": f"{BASE_URI}example.schema.json",
            "properties": {"id": {"$ref": "record-id.schema.json"}, "kind": {"$ref": "#/$defs/kind"}},
            "$defs": {"kind": {"$ref": "record.schema.json#/$defs/kind"}},
        }
    )
    assert check({"id": RECORD_ID, "kind": "fact"})
    assert not check({"id": "42"})
    assert not check({"kind": "note"})


def test_valid_requests_are_checked_without_importing_jsonschema() -> None:
    code = (
        "import sys\n"
        "from stormbuffer.protocol.requests import check_schema\n"
        f"check_schema('propose', {PROPOSE!r})\n"
        f"check_schema('search', {SEARCH!r})\n"
        "sys.exit('jsonschema' in sys.modules)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_an_invalid_request_still_gets_its_catalogue_error() -> None:
    with pytest.raises(ProtocolError) as failure:
        check_schema("search", {**SEARCH, "limit": 2.0, "zzz": 1})
    assert (failure.value.code, failure.value.message) == ("invalid_request", "request contains an unknown field")

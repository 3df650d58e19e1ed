"""The version-1 JSON Schemas, their examples, the contract store and the generated models agree."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from stormbuffer.core.codec import parse_markdown, render_markdown
from stormbuffer.core.secrets import contains_secret
from stormbuffer.core.stores import parse_config
from stormbuffer.protocol import schemas

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = ROOT / "schema" / "v1"
EXAMPLE_DIR = SCHEMA_DIR / "examples"
MODELS_DIR = ROOT / "generated" / "stormbuffer_models"
STORE = ROOT / "tests" / "fixtures" / "contract-store" / ".sbuf"
BASE_URI = "https://stormbuffer.dev/schema/v1/"
OPERATIONS = ("search", "context", "get", "remember", "update", "propose", "supersede", "archive")
ERROR_CODES = {
    "invalid_json", "invalid_request", "unsupported_version", "unknown_operation", "input_too_large",
    "output_too_large", "path_denied", "scope_denied", "access_denied", "permission_denied", "not_found",
    "not_initialized", "invalid_state", "invalid_record", "conflict", "internal_error", "secret_detected",
}  # fmt: skip
ANNOTATIONS = {"title", "description", "$schema", "$id"}  # keywords allowed next to a `$ref`
EXAMPLES = sorted(EXAMPLE_DIR.glob("*/*.json"))


def example_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def load_example(path: Path) -> tuple[str, dict[str, Any]]:
    return path.parent.name, json.loads(path.read_text(encoding="utf-8"))


def walk(node: Any) -> Any:
    """Every dict inside a JSON value."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item)


def errors(name: str, instance: Any) -> list[str]:
    return [error.message for error in schemas.validator(name).iter_errors(instance)]


# ---------------------------------------------------------------- schema files


def test_schema_names_match_the_files() -> None:
    files = sorted(path.name.removesuffix(".schema.json") for path in SCHEMA_DIR.glob("*.schema.json"))
    assert schemas.names() == files
    assert not (SCHEMA_DIR / "placeholder.json").exists()
    for operation in OPERATIONS:
        assert f"{operation}.request" in files and f"{operation}.result" in files


@pytest.mark.parametrize("name", schemas.names())
def test_schema_is_valid_2020_12_with_stable_identity(name: str) -> None:
    schema = schemas.load(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"{BASE_URI}{name}.schema.json"
    assert schema["title"] and schema["description"]


@pytest.mark.parametrize("name", schemas.names())
def test_refs_are_relative_resolvable_and_carry_only_annotations(name: str) -> None:
    schema = schemas.load(name)
    resolver = schemas.registry().resolver(base_uri=schema["$id"])
    for node in walk(schema):
        if "$ref" in node:
            assert "://" not in node["$ref"]
            resolver.lookup(node["$ref"])
            assert set(node) - {"$ref"} <= ANNOTATIONS


@pytest.mark.parametrize("name", schemas.names())
def test_bundled_schema_is_self_contained(name: str) -> None:
    bundle = schemas.bundled(name)
    assert "$ref" not in json.dumps(bundle)
    Draft202012Validator.check_schema(bundle)


def test_error_codes_are_exactly_the_seventeen() -> None:
    codes = schemas.load("error")["properties"]["code"]["enum"]
    assert len(codes) == 17
    assert set(codes) == ERROR_CODES


def test_request_allow_lists_match_the_protocol() -> None:
    record = ["title", "kind", "scope", "status", "access", "created_at", "updated_at", "tags", "aliases",
              "supersedes", "sources", "body"]  # fmt: skip
    expected = {
        "search": ["query", "limit", "scope", "scopes", "access"],
        "context": ["query", "limit", "budget", "scope", "scopes", "access"],
        "get": ["id", "scope", "scopes", "access"],
        "archive": ["id", "scope", "scopes", "access"],
        "remember": ["actor", "approved", "title", "kind", "scope", "tags", "aliases", "source", "body"],
        "update": ["actor", "approved", "id", "scope", "scopes", "title", "kind", "tags", "aliases", "source", "body"],
        "propose": ["actor", "approved", "record", "id", *record],
        "supersede": ["id", "access", "replacement", *record],
    }
    required = {"search": ["query"], "context": ["query"], "get": ["id"], "archive": ["id"], "update": ["id"],
                "supersede": ["id"], "remember": ["title", "kind", "body"], "propose": []}  # fmt: skip
    for operation, keys in expected.items():
        schema = schemas.load(f"{operation}.request")
        assert set(schema["properties"]) == {"version", "operation", *keys}, operation
        assert schema["required"] == ["version", *required[operation]], operation
        assert schema["additionalProperties"] is False
    assert set(schemas.load("record-fields")["properties"]) == {"id", *record}


def test_validator_types_formats_and_bounds() -> None:
    assert schemas.validator("search.request") is schemas.validator("search.request")
    request = {"version": 1, "query": "tar"}
    for limit in (0, 1, 100, 1000):  # clamped by the protocol, never refused
        assert errors("search.request", {**request, "limit": limit}) == []
    for limit in (-1, 2.0, "5", None, True):
        assert errors("search.request", {**request, "limit": limit}) != []
    assert errors("context.request", {**request, "budget": 10_000}) == []
    assert errors("search.request", {**request, "query": "x" * 2049}) != []
    assert errors("search.request", {**request, "access": "agent"}) == []
    assert errors("search.request", {**request, "scopes": []}) != []
    assert errors("search.request", {**request, "scopes": ["global"] * 17}) != []
    source = {"kind": "url", "reference": "https://example.test/a", "actor": "user"}
    assert errors("source", {**source, "observed_at": "2026-03-14T09:30:00.123456789-05:00"}) == []
    for bad in ("2026-03-14 09:30:00Z", "2026-03-14T09:30:00", "2026-02-30T09:30:00Z", 5):
        assert errors("source", {**source, "observed_at": bad}) != []
    assert errors("source", {**source, "reference": "r" * 2049}) != []
    assert errors("source", {**source, "extra": "x"}) != []
    for good in ("global", "project:0194d2a0-5c3e-7b41-9f2a-6c8d1e4b7a30", "project:alpha"):
        assert errors("scope", good) == []
    for bad in ("Global", "project:", "project:a b", "project:a:b", "local"):
        assert errors("scope", bad) != []
    canonical = "0194d2a1-2222-7a02-8a02-000000000002"
    for good in (canonical, canonical.upper(), "{" + canonical + "}", "urn:uuid:" + canonical,
                 canonical.replace("-", "")):  # fmt: skip
        assert errors("record-id", good) == []
    for bad in ("42", canonical + "0", " " + canonical):
        assert errors("record-id", bad) != []
    assert errors("receipt", {}) != []


def test_jsonschema_is_imported_lazily() -> None:
    code = "import sys, stormbuffer.protocol.schemas; sys.exit('jsonschema' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ---------------------------------------------------------------- MCP tool schemas


def test_mcp_tool_schemas_reuse_request_fields() -> None:
    tools = schemas.load("mcp-tools")["$defs"]
    expected = {
        "memory_recall": ("context", ["query"], (True, False)),
        "memory_get": ("get", ["id"], (True, False)),
        "memory_remember": ("remember", ["title", "kind", "body", "source"], (False, False)),
        "memory_update": ("update", ["id", "body", "source"], (False, False)),
        "memory_forget": ("archive", ["id"], (False, True)),
    }
    assert sorted(tools) == sorted(expected)
    for name, (operation, required, (read_only, destructive)) in expected.items():
        tool = tools[name]
        mcp = tool["x-mcp"]
        assert mcp["name"] == name and mcp["operation"] == operation and mcp["description"]
        assert mcp["annotations"] == {"readOnlyHint": read_only, "destructiveHint": destructive,
                                      "idempotentHint": False, "openWorldHint": False}  # fmt: skip
        assert tool["required"] == required and tool["additionalProperties"] is False
        request = schemas.load(f"{operation}.request")["properties"]
        for field, definition in tool["properties"].items():
            assert definition == {"$ref": f"{operation}.request.schema.json#/properties/{field}"}
            assert field in request


def test_bundled_mcp_tool_is_plain_json_schema() -> None:
    recall = schemas.bundled("mcp-tools")["$defs"]["memory_recall"]
    assert recall["properties"]["query"]["maxLength"] == 2048
    assert recall["properties"]["access"]["enum"] == ["agent", "human"]
    remember = schemas.bundled("mcp-tools")["$defs"]["memory_remember"]
    assert remember["properties"]["source"]["required"] == ["kind", "reference", "actor"]
    assert remember["properties"]["kind"]["enum"] == ["fact", "decision", "procedure", "checkpoint"]


# ---------------------------------------------------------------- examples


def test_every_operation_has_success_and_failure_examples() -> None:
    assert {path.parent.name for path in EXAMPLES} == set(OPERATIONS)
    for operation in OPERATIONS:
        outcomes = {load_example(path)[1]["response"]["ok"] for path in EXAMPLE_DIR.glob(f"{operation}/*.json")}
        assert outcomes == {True, False}, operation


@pytest.mark.parametrize("path", EXAMPLES, ids=example_id)
def test_example_request_matches_its_schema(path: Path) -> None:
    operation, example = load_example(path)
    assert set(example) <= {"description", "view", "request_valid", "request", "response"}
    assert example["description"] and example["view"] in ("global", "project", "local")
    request_errors = errors(f"{operation}.request", example["request"])
    if example.get("request_valid", True):
        assert request_errors == []
    else:
        assert request_errors != []


@pytest.mark.parametrize("path", EXAMPLES, ids=example_id)
def test_bundled_schemas_judge_examples_like_the_originals(path: Path) -> None:
    operation, example = load_example(path)
    cases = [(f"{operation}.request", example["request"]), ("envelope", example["response"])]
    if example["response"]["ok"]:
        cases.append((f"{operation}.result", example["response"]["result"]))
    for name, instance in cases:
        original = Draft202012Validator(schemas.load(name), registry=schemas.registry())
        bundled = Draft202012Validator(schemas.bundled(name))
        assert sorted(e.message for e in bundled.iter_errors(instance)) == sorted(
            e.message for e in original.iter_errors(instance)
        )


@pytest.mark.parametrize("path", EXAMPLES, ids=example_id)
def test_example_response_matches_envelope_and_result(path: Path) -> None:
    operation, example = load_example(path)
    response = example["response"]
    assert errors("envelope", response) == []
    assert response["operation"] == operation
    if response["ok"]:
        assert errors(f"{operation}.result", response["result"]) == []
    else:
        text = json.dumps(response)
        assert not contains_secret(text) and "/home/" not in text


@pytest.mark.parametrize("path", EXAMPLES, ids=example_id)
def test_example_response_parses_with_generated_models(path: Path) -> None:
    operation, example = load_example(path)
    envelope = importlib.import_module("stormbuffer_models.envelope_schema").Envelope
    parsed = envelope.model_validate(example["response"])
    assert parsed.root.ok is example["response"]["ok"]
    if example["response"]["ok"]:
        module = importlib.import_module(f"stormbuffer_models.{operation}_result_schema")
        model = getattr(module, schemas.load(f"{operation}.result")["title"])
        model.model_validate(example["response"]["result"])


def test_generated_context_result_model_reads_an_example() -> None:
    from stormbuffer_models.context_result_schema import ContextResult

    _, example = load_example(EXAMPLE_DIR / "context" / "budget-truncation.json")
    result = ContextResult.model_validate(example["response"]["result"])
    assert result.receipt.truncated is True and result.receipt.semantic_fallback == "model_unavailable"
    assert result.blocks[0].sources[0].observed_at.utcoffset().total_seconds() == -5 * 3600
    assert result.model_dump(mode="json", exclude_unset=True) == example["response"]["result"]


# ---------------------------------------------------------------- contract store


def store_records() -> dict[str, Any]:
    records = {}
    for path in sorted((STORE / "records").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        record = parse_markdown(text, path.name)
        assert render_markdown(record) == text, f"{path.name} is not canonical"
        assert path.name == f"{record.id}.md"
        records[record.id] = record
    return records


def test_contract_store_is_a_canonical_private_project_store() -> None:
    config = parse_config((STORE / "store.toml").read_text(encoding="utf-8"), "project")
    assert config.project_name == "contract-store" and config.visibility == "private"
    assert config.render() == (STORE / "store.toml").read_text(encoding="utf-8")
    assert (STORE / ".gitignore").read_bytes() == b"*\n!.gitignore\n"
    records = store_records().values()
    assert {record.scope for record in records} == {config.record_scope}

    def has(**fields: str) -> list[Any]:
        return [r for r in records if all(getattr(r, key) == value for key, value in fields.items())]

    assert has(kind="fact", status="active", access="agent")
    decisions = has(kind="decision", status="active", access="agent")
    assert any(
        len(r.sources) == 2 and any(s.observed_at is not None and s.observed_at.offset_minutes != 0 for s in r.sources)
        for r in decisions
    )
    assert has(status="active", access="human")
    assert has(status="candidate")


@pytest.mark.parametrize("path", EXAMPLES, ids=example_id)
def test_example_records_agree_with_the_contract_store(path: Path) -> None:
    operation, example = load_example(path)
    records = {record_id: record.to_json() for record_id, record in store_records().items()}
    response = example["response"]
    if not response["ok"]:
        return
    result = response["result"]
    if operation == "get":
        assert result == records[result["id"]]
    items = result if operation == "search" else result.get("blocks", []) if operation == "context" else []
    for item in items:
        record = records[item["record_id"]]
        assert record["status"] == "active" and record["access"] == "agent"
        for key in ("title", "kind", "scope", "status", "access", "sources"):
            assert item[key] == record[key]
        text = item.get("excerpt", item.get("text"))
        assert " ".join(text.split()) in " ".join(record["body"].split())
    if operation == "context":
        receipt = result["receipt"]
        assert receipt["used_tokens"] == sum(block["token_count"] for block in result["blocks"])
        assert all(block["token_count"] == len(block["text"].split()) for block in result["blocks"])


# ---------------------------------------------------------------- generated models and the wheel


def test_generated_models_are_up_to_date(tmp_path: Path) -> None:
    fresh = tmp_path / "models"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_models.py"), "--output", str(fresh)], check=True)
    committed = {path.name: path.read_bytes() for path in MODELS_DIR.glob("*.py")}
    regenerated = {path.name: path.read_bytes() for path in fresh.glob("*.py")}
    assert sorted(regenerated) == sorted(committed)
    for name, content in regenerated.items():
        assert content == committed[name], f"{name} differs; run `just gen`"


def test_wheel_ships_schemas_and_models(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp_path), str(ROOT)]
    subprocess.run(command, check=True)
    (wheel,) = tmp_path.glob("stormbuffer-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for schema in SCHEMA_DIR.glob("*.schema.json"):
        assert f"stormbuffer/schema/v1/{schema.name}" in names
    for module in MODELS_DIR.glob("*.py"):
        assert f"stormbuffer_models/{module.name}" in names
    assert "stormbuffer/protocol/schemas.py" in names
    for bundle in (SCHEMA_DIR / "bundled").glob("*.schema.json"):
        assert f"stormbuffer/schema/v1/bundled/{bundle.name}" in names
    for record in (STORE / "records").glob("*.md"):  # the conformance kit's store
        assert f"stormbuffer/conformance/contract_store/records/{record.name}" in names
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/entry_points.txt")))
    assert b"[pytest11]\nstormbuffer = stormbuffer.conformance.pytest_plugin" in entry_points

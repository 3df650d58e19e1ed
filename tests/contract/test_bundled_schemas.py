"""The single-file schemas in schema/v1/bundled/ are current and judge every example like the originals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from stormbuffer.protocol import schemas

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "schema" / "v1" / "bundled"
EXAMPLES = sorted((ROOT / "schema" / "v1" / "examples").glob("*/*.json"))


def test_committed_bundles_match_a_fresh_bundle(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bundle_schemas.py"), "--output", str(tmp_path)], check=True)
    fresh = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    committed = {path.name: path.read_bytes() for path in BUNDLED.iterdir()}
    assert sorted(fresh) == sorted(committed), "run `just docs`"
    assert [name for name, content in fresh.items() if committed[name] != content] == [], "run `just docs`"
    assert len(committed) == 9 and "mcp-tools.schema.json" in committed


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_a_bundle_judges_its_examples_like_the_schema_files(path: Path) -> None:
    operation, example = path.parent.name, json.loads(path.read_text(encoding="utf-8"))
    bundle = json.loads((BUNDLED / f"{operation}.schema.json").read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(bundle)
    assert "$ref" not in json.dumps(bundle)
    cases = [("request", f"{operation}.request", example["request"]), ("envelope", "envelope", example["response"])]
    if example["response"]["ok"]:
        cases.append(("result", f"{operation}.result", example["response"]["result"]))
    for part, name, instance in cases:
        original = Draft202012Validator(schemas.load(name), registry=schemas.registry())
        single = Draft202012Validator({**bundle["$defs"][part], "$schema": bundle["$schema"]})
        assert sorted(e.message for e in single.iter_errors(instance)) == sorted(
            e.message for e in original.iter_errors(instance)
        ), (part, name)


def test_the_tools_bundle_describes_the_five_tools() -> None:
    bundle = json.loads((BUNDLED / "mcp-tools.schema.json").read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(bundle)
    tools = ["memory_forget", "memory_get", "memory_recall", "memory_remember", "memory_update"]
    assert sorted(bundle["$defs"]) == tools
    assert bundle["$defs"]["memory_recall"]["properties"]["query"]["maxLength"] == 2048

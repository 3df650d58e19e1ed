"""Golden contract tests: every example in schema/v1/examples/ is run through a real `sbuf invoke`.

Each case gets a fresh copy of tests/fixtures/contract-store/ and must produce the example's
envelope exactly. Only values that differ on every run are masked: `receipt_id` and
`retrieved_at` of receipts, the generated `record_id` of proposal results and the generated `id`
of supersede results (each still checked for its format); scores may differ by 1e-9.

Examples run without the semantic model (an empty cache: `semantic_fallback` is
`model_unavailable`), so they are deterministic. An example whose response shows hybrid retrieval
runs with the real model instead and is compared structurally: embedding distances, scores and
the model version are checked for type, everything else (order, ids, texts, reasons) exactly.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stormbuffer.core.ids import is_canonical_uuid
from stormbuffer.core.timestamps import Timestamp
from stormbuffer.embedding import DEFAULT_VARIANT
from tests.helpers import invoke, link_tree, sbuf_env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "schema" / "v1" / "examples").glob("*/*.json"))
CONTRACT_STORE = ROOT / "tests" / "fixtures" / "contract-store"
TOLERANCE = 1e-9
MASK = "<generated>"
_DISTANCE = re.compile(r"vector:distance=\d+\.\d{6}")
_FUSION = re.compile(r"fusion:lexical=\d\.\d{3},vector=\d\.\d{3}")


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def is_hybrid(example: dict[str, Any]) -> bool:
    text = json.dumps(example["response"])
    return '"retrieval_mode": "hybrid"' in text or '"vector:distance=' in text


def mask_generated(operation: str, request: dict[str, Any], envelope: dict[str, Any]) -> dict[str, Any]:
    """Replace the per-run values by a marker after checking their format."""
    envelope = json.loads(json.dumps(envelope))
    result = envelope.get("result")
    if not envelope["ok"]:
        return envelope
    if operation == "context":
        receipt = result["receipt"]
        assert is_canonical_uuid(receipt["receipt_id"])
        Timestamp.parse(receipt["retrieved_at"])
        receipt["receipt_id"] = receipt["retrieved_at"] = MASK
    chosen_id = operation == "propose" and "id" in request.get("record", request)
    if operation in ("remember", "update", "propose") and not chosen_id:
        assert is_canonical_uuid(result["record_id"])
        result["record_id"] = MASK
    if operation == "supersede" and "id" not in request.get("replacement", {}):
        assert is_canonical_uuid(result["id"]) and result["id"] != request["id"]
        result["id"] = MASK
    return envelope


def mask_semantic(node: Any) -> Any:
    """For hybrid examples: numbers from the model become their type, distance and fusion reasons their prefix."""
    if isinstance(node, dict):
        out = {key: mask_semantic(value) for key, value in node.items()}
        for key in ("score", "vector_distance"):
            if isinstance(out.get(key), float):
                out[key] = "<number>"
        if isinstance(out.get("embedding_version"), str):
            out["embedding_version"] = "<model version>"
        return out
    if isinstance(node, list):
        return [mask_semantic(item) for item in node]
    if isinstance(node, str) and _DISTANCE.fullmatch(node):
        return "vector:distance=<number>"
    if isinstance(node, str) and _FUSION.fullmatch(node):
        return "fusion:lexical=<number>,vector=<number>"
    return node


def assert_same(expected: Any, actual: Any, where: str = "$") -> None:
    if isinstance(expected, float) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        assert abs(expected - actual) <= TOLERANCE, f"{where}: expected {expected}, got {actual}"
    elif isinstance(expected, dict) and isinstance(actual, dict):
        assert sorted(expected) == sorted(actual), f"{where}: keys {sorted(expected)} != {sorted(actual)}"
        for key in expected:
            assert_same(expected[key], actual[key], f"{where}.{key}")
    elif isinstance(expected, list) and isinstance(actual, list):
        assert len(expected) == len(actual), f"{where}: {len(expected)} items expected, got {len(actual)}"
        for index, (left, right) in enumerate(zip(expected, actual, strict=True)):
            assert_same(left, right, f"{where}[{index}]")
    else:
        assert expected == actual, f"{where}: expected {expected!r}, got {actual!r}"


def run_example(path: Path, base: Path, models: Path | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run one example in a fresh copy of the contract store; `models` is a model cache to link in."""
    example = load(path)
    operation = path.parent.name
    shutil.copytree(CONTRACT_STORE, base / "store")
    env = sbuf_env(base)
    if models is not None:
        link_tree(models, base / "cache" / "stormbuffer" / "models")
    envelope = invoke(operation, example["request"], cwd=base / "store", env=env, view=example["view"])
    expected = mask_generated(operation, example["request"], example["response"])
    return expected, mask_generated(operation, example["request"], envelope)


@pytest.mark.parametrize(
    "path", [p for p in EXAMPLES if not is_hybrid(load(p))], ids=lambda p: f"{p.parent.name}/{p.stem}"
)
def test_example_without_the_model(path: Path, tmp_path: Path) -> None:
    expected, actual = run_example(path, tmp_path, None)
    assert_same(expected, actual)


@pytest.mark.parametrize("path", [p for p in EXAMPLES if is_hybrid(load(p))], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_hybrid_example_with_the_model(path: Path, tmp_path: Path, model_cache: Callable[[str], Path]) -> None:
    expected, actual = run_example(path, tmp_path, model_cache(DEFAULT_VARIANT) / "models")
    receipt = actual["result"].get("receipt") if isinstance(actual["result"], dict) else None
    if receipt is not None:
        assert receipt["retrieval_mode"] == "hybrid" and receipt["semantic_fallback"] is None
        assert receipt["embedding_model"] and receipt["embedding_version"]
    reasons = [
        reason
        for item in _items(actual["result"])
        for reason in item.get("match_reasons", item.get("ranking_reasons", []))
    ]
    assert any(reason.startswith("vector:distance=") for reason in reasons)
    assert_same(mask_semantic(expected), mask_semantic(actual))


def _items(result: Any) -> list[dict[str, Any]]:
    return result if isinstance(result, list) else result.get("blocks", [])


def test_there_is_a_hybrid_example_for_search_and_context() -> None:
    hybrid = {path.parent.name for path in EXAMPLES if is_hybrid(load(path))}
    assert {"search", "context"} <= hybrid

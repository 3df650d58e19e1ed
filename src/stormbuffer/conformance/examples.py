"""The `schema/v1` examples and how an answer is compared with an example's expected envelope.

Values that differ on every run are checked for their format and masked: `receipt_id` and
`retrieved_at` of receipts, the generated `record_id` of proposal results and the generated `id` of
supersede results. Scores may differ by 1e-9. An example whose response shows hybrid retrieval is
compared structurally: scores, distances and the model version are checked for type only. Keys an
answer adds to an example's objects are allowed (the schemas decide whether they may be there).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from stormbuffer.core.ids import is_canonical_uuid
from stormbuffer.core.timestamps import Timestamp

TOLERANCE = 1e-9
MASK = "<generated>"
WRITES = frozenset({"remember", "update", "propose", "supersede", "archive"})
_DISTANCE = re.compile(r"vector:distance=\d+\.\d{6}")
_FUSION = re.compile(r"fusion:lexical=\d\.\d{3},vector=\d\.\d{3}")


@dataclass(frozen=True)
class Example:
    operation: str
    case: str
    request: Any
    response: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.operation}/{self.case}"

    @property
    def hybrid(self) -> bool:
        text = json.dumps(self.response)
        return '"retrieval_mode": "hybrid"' in text or '"vector:distance=' in text

    @property
    def writes(self) -> bool:
        """Whether the example changes the store (a successful write operation)."""
        return self.operation in WRITES and self.response["ok"] is True


@cache
def examples() -> tuple[Example, ...]:
    """Every example shipped with the package, sorted by operation and case."""
    root = files("stormbuffer") / "schema" / "v1" / "examples"
    found = []
    for folder in sorted((entry for entry in root.iterdir() if entry.is_dir()), key=lambda entry: entry.name):
        for entry in sorted(folder.iterdir(), key=lambda entry: entry.name):
            if entry.name.endswith(".json"):
                data = json.loads(entry.read_text(encoding="utf-8"))
                found.append(Example(folder.name, entry.name.removesuffix(".json"), data["request"], data["response"]))
    return tuple(found)


def mask_generated(operation: str, request: Any, envelope: Any) -> Any:
    """A copy of `envelope` with the per-run values replaced by a marker; ValueError when one of them
    does not have its format."""
    envelope = json.loads(json.dumps(envelope))
    if not isinstance(envelope, dict) or envelope.get("ok") is not True or not isinstance(request, dict):
        return envelope
    result = envelope.get("result")
    if not isinstance(result, dict):
        return envelope
    if operation == "context" and isinstance(result.get("receipt"), dict):
        receipt = result["receipt"]
        _check(is_canonical_uuid(receipt.get("receipt_id")), "receipt_id is not a UUID")
        try:
            Timestamp.parse(receipt.get("retrieved_at"))
        except Exception:
            raise ValueError("retrieved_at is not an RFC 3339 timestamp") from None
        receipt["receipt_id"] = receipt["retrieved_at"] = MASK
    record = request.get("record", request)
    chosen_id = operation == "propose" and isinstance(record, dict) and "id" in record
    if operation in ("remember", "update", "propose") and not chosen_id and "record_id" in result:
        _check(is_canonical_uuid(result["record_id"]), "record_id is not a canonical UUID")
        result["record_id"] = MASK
    replacement = request.get("replacement")
    if operation == "supersede" and not (isinstance(replacement, dict) and "id" in replacement) and "id" in result:
        _check(is_canonical_uuid(result["id"]) and result["id"] != request.get("id"), "id is not a new UUID")
        result["id"] = MASK
    return envelope


def _check(condition: bool, reason: str) -> None:
    if not condition:
        raise ValueError(reason)


def mask_semantic(node: Any) -> Any:
    """Numbers that come from the model become their type, distance and fusion reasons their prefix."""
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


def difference(expected: Any, actual: Any, where: str = "$", *, extra: bool = False) -> str | None:
    """The first place where `actual` differs from `expected`, as one line; None when they agree.

    With `extra`, `actual` may hold keys `expected` does not: optional additions the schemas allow
    (whether they do is the envelope check's business).
    """
    if isinstance(expected, float) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        return None if abs(expected - actual) <= TOLERANCE else f"{where}: expected {expected}, got {actual}"
    if isinstance(expected, dict) and isinstance(actual, dict):
        missing, added = sorted(set(expected) - set(actual)), sorted(set(actual) - set(expected))
        if missing or (added and not extra):
            return f"{where}: missing keys {missing}, unexpected keys {added}"
        found = (difference(expected[key], actual[key], f"{where}.{key}", extra=extra) for key in expected)
        return next((line for line in found if line), None)
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return f"{where}: expected {len(expected)} items, got {len(actual)}"
        pairs = enumerate(zip(expected, actual, strict=True))
        return next((line for i, (a, b) in pairs if (line := difference(a, b, f"{where}[{i}]", extra=extra))), None)
    if type(expected) is not type(actual) or expected != actual:
        return f"{where}: expected {_short(expected)}, got {_short(actual)}"
    return None


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."

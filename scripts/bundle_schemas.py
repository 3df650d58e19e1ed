"""Write the single-file JSON Schemas of version 1 into schema/v1/bundled/ (shipped in the wheel).

Usage: python scripts/bundle_schemas.py [--output DIR]

One file per operation, `<operation>.schema.json`, holds under `$defs` its `request`, its `result`
and the `envelope`, each with every `$ref` inlined, for hosts and tools that cannot resolve
references between files; `mcp-tools.schema.json` holds the arguments of the five MCP tools. `just
docs` runs this script; a test fails when the committed files are not what it writes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from stormbuffer.protocol import schemas
from stormbuffer.protocol.requests import OPERATIONS

ROOT = Path(__file__).resolve().parent.parent

OUTPUT = ROOT / "schema" / "v1" / "bundled"
BASE_URI = "https://stormbuffer.dev/schema/v1/bundled/"
DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _part(name: str) -> dict[str, Any]:
    bundle = schemas.bundled(name)
    bundle.pop("$schema", None)
    return bundle


def operation_bundle(operation: str) -> dict[str, Any]:
    return {
        "$schema": DRAFT,
        "$id": f"{BASE_URI}{operation}.schema.json",
        "title": f"The `{operation}` operation",
        "description": f"`#/$defs/request` is what `sbuf invoke {operation}` reads, `#/$defs/envelope` every answer, "
        f"`#/$defs/result` the `result` of a successful answer. Every reference is inlined.",
        "$defs": {"request": _part(f"{operation}.request"), "result": _part(f"{operation}.result"),
                  "envelope": _part("envelope")},
    }  # fmt: skip


def tools_bundle() -> dict[str, Any]:
    bundle = schemas.bundled("mcp-tools")
    bundle["$id"] = f"{BASE_URI}mcp-tools.schema.json"
    return bundle


def bundles() -> dict[str, dict[str, Any]]:
    """File name → content."""
    found = {f"{operation}.schema.json": operation_bundle(operation) for operation in OPERATIONS}
    found["mcp-tools.schema.json"] = tools_bundle()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT, help="target directory")
    output = parser.parse_args().output
    output.mkdir(parents=True, exist_ok=True)
    for stale in output.glob("*.schema.json"):
        stale.unlink()
    for name, content in bundles().items():
        (output / name).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

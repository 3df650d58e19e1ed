"""The rendered protocol reference in docs/reference/ is current and covers every operation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
OPERATIONS = ("search", "context", "get", "remember", "update", "propose", "supersede", "archive")


def test_committed_reference_matches_a_fresh_render(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render_schema_docs.py"), "--output", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    fresh = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    committed = {path.name: path.read_bytes() for path in REFERENCE.iterdir()}
    assert sorted(fresh) == sorted(committed), "run `just docs`"
    stale = [name for name, content in fresh.items() if committed[name] != content]
    assert not stale, f"{stale} are stale; run `just docs`"


def test_reference_covers_each_operation_in_both_formats() -> None:
    index = (REFERENCE / "index.md").read_text(encoding="utf-8")
    assert "`secret_detected`" in index and "`path_denied`" in index
    for operation in OPERATIONS:
        markdown = (REFERENCE / f"{operation}.md").read_text(encoding="utf-8")
        page = (REFERENCE / f"{operation}.html").read_text(encoding="utf-8")
        assert f"({operation}.md)" in index
        for heading in ("## Request", "## Result", "## Errors", "## Examples"):
            assert heading in markdown
        assert page.startswith("<!DOCTYPE html>") and '<h2 id="request">' in page
        examples = sorted((ROOT / "schema" / "v1" / "examples" / operation).glob("*.json"))
        assert examples and all(f"### {example.stem}" in markdown for example in examples)

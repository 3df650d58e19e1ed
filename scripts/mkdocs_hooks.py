"""MkDocs hooks: the single-file schemas of schema/v1/bundled/ are published with the site under `schemas/`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

BUNDLED = Path(__file__).resolve().parent.parent / "schema" / "v1" / "bundled"


def on_files(files: Files, config: Any) -> Files:
    for path in sorted(BUNDLED.glob("*.schema.json")):
        files.append(File.generated(config, f"schemas/{path.name}", abs_src_path=str(path)))
    return files

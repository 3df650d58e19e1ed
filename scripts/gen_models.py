"""Generate the Pydantic models in generated/stormbuffer_models/ from schema/v1/.

Usage: python scripts/gen_models.py [--output DIR]

The datamodel-code-generator arguments live here only; `just gen` and the regeneration test both
run this script. Output is deterministic (no timestamps, the generator's built-in formatter).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "schema" / "v1"
MODELS_DIR = ROOT / "generated" / "stormbuffer_models"
PACKAGE_INIT = '"""Pydantic models generated from schema/ (do not edit)."""\n'
GENERATOR_ARGS = [
    "--input-file-type", "jsonschema",
    "--output-model-type", "pydantic_v2.BaseModel",
    "--target-python-version", "3.11",
    "--use-double-quotes",
    "--disable-timestamp",
    "--formatters", "builtin",
    "--use-title-as-name",
    "--collapse-root-models",
    "--use-annotated",
    "--field-constraints",
    "--use-schema-description",
    "--use-field-description",
]  # fmt: skip


def generate(output: Path) -> None:
    """Write one module per schema file into `output`, replacing the `.py` files already there."""
    with tempfile.TemporaryDirectory() as scratch:
        schemas, staged = Path(scratch) / "schemas", Path(scratch) / "models"
        schemas.mkdir()
        for schema in SCHEMA_DIR.glob("*.schema.json"):  # only the schemas, not the examples beside them
            shutil.copyfile(schema, schemas / schema.name)
        command = [sys.executable, "-m", "datamodel_code_generator", "--input", str(schemas), "--output",
                   str(staged), *GENERATOR_ARGS]  # fmt: skip
        subprocess.run(command, check=True, cwd=ROOT)
        (staged / "__init__.py").write_text(PACKAGE_INIT, encoding="utf-8")
        output.mkdir(parents=True, exist_ok=True)
        for stale in output.glob("*.py"):
            stale.unlink()
        for module in sorted(staged.glob("*.py")):
            shutil.copyfile(module, output / module.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=MODELS_DIR, help="target package directory")
    generate(parser.parse_args().output)


if __name__ == "__main__":
    main()

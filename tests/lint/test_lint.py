"""The code passes `just lint` (ruff check, ruff format --check, mypy), so the test command also lints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JUST = Path(sys.executable).parent / "just"  # from the dev extra, beside the interpreter
TIMEOUT = 900  # seconds; mypy without its cache on a slow machine


def test_just_lint_passes() -> None:
    """The Justfile's own recipe runs, with this interpreter's ruff and mypy."""
    done = subprocess.run(
        [str(JUST), "--justfile", str(ROOT / "Justfile"), "--set", "python", sys.executable, "lint"],
        cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"`just lint` failed:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"

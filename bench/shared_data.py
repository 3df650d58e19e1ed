"""The third-party retrieval data benchmarks read from `../shared/bench`, checked before any work starts.

`require(data)` returns the directory when every file its `SHA256SUMS` lists is there with the pinned
digest; otherwise it stops the benchmark with one message naming what is missing or differs, where
it was looked for, and how to point the benchmark elsewhere (`--data`).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT.parent / "shared" / "bench"
CHECKSUMS = "SHA256SUMS"


def _stop(data: Path, problems: list[str]) -> NoReturn:
    """Print what is wrong with the data on stderr and exit with status 2."""
    lines = [f"benchmark data is not usable at {data}:", *(f"  - {problem}" for problem in problems)]
    lines.append(f"Put the data set there (it ships beside the repository as ../shared/bench, with {CHECKSUMS}),")
    lines.append("or pass --data DIR pointing at a copy.")
    print("\n".join(lines), file=sys.stderr)
    raise SystemExit(2)


def require(data: Path) -> Path:
    """`data`, once every file listed in its SHA256SUMS exists and has the pinned sha256."""
    if not data.is_dir():
        _stop(data, ["the directory does not exist"])
    checksums = data / CHECKSUMS
    if not checksums.is_file():
        _stop(data, [f"{CHECKSUMS} is missing"])
    problems = []
    for line in checksums.read_text().splitlines():
        if not line.strip():
            continue
        expected, name = line.split(maxsplit=1)
        path = data / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != expected:
            problems.append(f"{name} does not match its pinned sha256 (a different or damaged copy)")
    if problems:
        _stop(data, problems)
    return data

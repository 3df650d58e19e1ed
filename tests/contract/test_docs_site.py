"""The documentation site builds with warnings as errors and publishes the guide, the protocol, the
schema reference, the integrator's guide and the single-file schemas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                          env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr
    for page in ("index.html", "protocol/index.html", "integrators/index.html", "mcp/index.html",
                 "reference/index.html", "reference/context/index.html"):  # fmt: skip
        assert (site / page).is_file(), page
    assert "sbuf conformance" in (site / "integrators" / "index.html").read_text(encoding="utf-8")
    for bundle in (ROOT / "schema" / "v1" / "bundled").glob("*.schema.json"):
        published = (site / "schemas" / bundle.name).read_text(encoding="utf-8")
        assert json.loads(published) == json.loads(bundle.read_text(encoding="utf-8"))

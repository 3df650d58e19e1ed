"""The plugins' own `node --test` suites, run on the pinned Node.js."""

from __future__ import annotations

import subprocess

import pytest

from tests import tools
from tests.plugins.conftest import PLUGINS


@pytest.mark.parametrize(
    "package",
    [
        "claude-plugin-stormbuffer",
        "codex-plugin-stormbuffer",
        "gemini-extension-stormbuffer",
        "opencode-plugin-stormbuffer",
        "pi-plugin-stormbuffer",
    ],
)
def test_node_suite_passes(package: str) -> None:
    suites = sorted(str(path.relative_to(PLUGINS / package)) for path in (PLUGINS / package).glob("test/*.test.*"))
    assert suites
    done = subprocess.run(
        [str(tools.node()), "--test", *suites],
        cwd=PLUGINS / package,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout

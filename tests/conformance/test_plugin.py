"""The pytest plugin, as an integrator uses it: installed through its `pytest11` entry point, run by
a separate pytest in a directory outside this repository's tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import BIN

STAND_INS = Path(__file__).parent / "stand_ins"
INTEGRATOR_TESTS = """
def test_stormbuffer_contract(stormbuffer_check):
    stormbuffer_check()


def test_clients_share_a_fresh_store(stormbuffer_invoke, stormbuffer_mcp, stormbuffer_place):
    assert stormbuffer_invoke.get(id="0194d2a1-1111-7a01-8a01-000000000001").root.status == "active"
    assert stormbuffer_mcp.forget(id="0194d2a1-1111-7a01-8a01-000000000001").root.status == "archived"
    assert stormbuffer_invoke.get(id="0194d2a1-1111-7a01-8a01-000000000001").root.status == "archived"
    assert (stormbuffer_place.cwd / ".sbuf" / "store.toml").is_file()
"""


def integrator_pytest(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_integration.py").write_text(INTEGRATOR_TESTS, encoding="utf-8")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", *args]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False)


def test_plugin_fixtures_and_checks_pass_against_our_doors(tmp_path: Path, caller_env: dict[str, str]) -> None:
    doors = ["--stormbuffer-invoke", str(BIN / "sbuf"), "--stormbuffer-mcp", str(BIN / "stormbuffer-mcp")]
    done = integrator_pytest(tmp_path, caller_env, "-k", "invalid-json or path-denied or mcp.tools or clients", *doors)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout  # two behaviours, mcp.tools and the fixtures test


def test_plugin_fails_the_broken_check(tmp_path: Path, caller_env: dict[str, str]) -> None:
    broken = f"{sys.executable} {STAND_INS / 'wrong_error_code.py'}"
    selected = "invoke.example.get/not-found or invoke.example.get/active-record"
    done = integrator_pytest(tmp_path, caller_env, "-k", selected, "--stormbuffer-invoke", broken)
    assert done.returncode == 1
    assert "1 failed, 1 passed" in done.stdout, done.stdout[-3000:]
    assert "FAILED test_integration.py::test_stormbuffer_contract[invoke.example.get/not-found]" in done.stdout

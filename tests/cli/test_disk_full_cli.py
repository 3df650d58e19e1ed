"""A full disk is reported as "no space left on device" by every command, never as a traceback or a
damaged index. The store lives on a real 2 MiB tmpfs filled to the last byte, so every layer (record
writes, SQLite, the vector files) meets a real ENOSPC: the mount is made in a private mount namespace
(`unshare`, which needs no privilege where user namespaces are enabled, and works as root)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.helpers import SBUF, Sandbox

DRIVER = r"""
import json, os, shutil, subprocess, sys
cwd, sbuf, side = sys.argv[1:4]
store = os.path.join(cwd, ".sbuf")
shutil.copytree(store, side, symlinks=True)
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", store], check=True)
shutil.copytree(side, store, symlinks=True, dirs_exist_ok=True)
for name in os.listdir(store):
    if name.startswith("index.sqlite3"):
        os.remove(os.path.join(store, name))
try:
    with open(os.path.join(store, "filler"), "wb", buffering=0) as filler:
        while True:
            filler.write(b"\0" * 65536)
except OSError:
    pass
search = json.dumps({"version": 1, "query": "deploy"})
commands = {
    "reindex": (["--project", "reindex"], None),
    "search": (["--project", "search", "deploy"], None),
    "invoke": (["--project", "invoke", "search"], search),
    "doctor": (["--project", "doctor"], None),
    "add": (["--project", "add", "--title", "Full", "--body", "No room."], None),
}
results = {}
for name, (args, stdin) in commands.items():
    done = subprocess.run([sbuf, *args], cwd=cwd, input=stdin, capture_output=True, text=True)
    results[name] = [done.returncode, done.stdout, done.stderr]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, acquired_models: object) -> dict[str, list[object]]:
    from tests.helpers import link_tree

    base = tmp_path_factory.mktemp("full")
    box = Sandbox.create(base)
    link_tree(acquired_models, base / "cache" / "stormbuffer" / "models")  # type: ignore[arg-type]
    assert box.sbuf("--project", "init").returncode == 0
    for number in range(3):
        added = box.sbuf("--project", "add", "--access", "agent", "--title", f"Deploy rule {number}",
                         "--body", f"Deploys need a green build, rule {number}.")  # fmt: skip
        assert added.returncode == 0, added.stderr
    unshare = shutil.which("unshare")
    assert unshare, "util-linux `unshare` is needed to mount a private tmpfs"
    done = subprocess.run(
        [unshare, "--user", "--map-root-user", "--mount", sys.executable, "-c", DRIVER,
         str(box.cwd), str(SBUF), str(base / "side")],
        env=box.env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    parsed: dict[str, list[object]] = json.loads(done.stdout)
    return parsed


@pytest.mark.parametrize("command", ["reindex", "search", "add"])
def test_a_human_command_says_no_space_left_on_device(results: dict[str, list[object]], command: str) -> None:
    code, _stdout, stderr = results[command]
    assert code == 1 and "Traceback" not in str(stderr)
    assert "no space left on device" in str(stderr) and "writable" not in str(stderr), stderr


def test_invoke_says_no_space_left_on_device(results: dict[str, list[object]]) -> None:
    code, stdout, _stderr = results["invoke"]
    assert code == 1
    error = json.loads(str(stdout))["error"]
    assert error["code"] == "internal_error" and error["message"].startswith("no space left on device")


def test_doctor_says_no_space_left_on_device_not_a_damaged_index(results: dict[str, list[object]]) -> None:
    code, stdout, _stderr = results["doctor"]
    assert code == 1 and "failure: no space left on device" in str(stdout)
    assert "damaged, foreign or of another version" not in str(stdout)

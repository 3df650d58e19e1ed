"""`sbuf plugin install`: the installed layout, a host that is missing, and the wheel's copy of the plugins."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.helpers import run_sbuf, sbuf_env
from tests.plugins.conftest import PLUGINS, ROOT

NO_HOSTS = os.pathsep.join(["/usr/bin", "/bin"])


def test_a_missing_host_cli_is_a_clear_error_after_the_files_are_in_place(tmp_path: Path) -> None:
    target = tmp_path / "installed"
    env = sbuf_env(tmp_path, PATH=NO_HOSTS)
    done = run_sbuf("--project", "plugin", "install", "pi", "--directory", str(target), cwd=tmp_path, env=env)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"error: could not run `pi install {target}/plugins/pi-plugin-stormbuffer` (FileNotFoundError); "
        "install pi and rerun"
    )
    pi = target / "plugins" / "pi-plugin-stormbuffer"
    assert (pi / "src" / "index.js").read_bytes() == (
        PLUGINS / "pi-plugin-stormbuffer" / "src" / "index.js"
    ).read_bytes()
    assert (pi / "skills" / "stormbuffer-memory" / "SKILL.md").is_file()
    assert not (pi / "test").exists()
    shared = target / "plugins" / "node_modules" / "codex-plugin-stormbuffer" / "hooks" / "lifecycle.mjs"
    assert shared.read_bytes() == (PLUGINS / "codex-plugin-stormbuffer" / "hooks" / "lifecycle.mjs").read_bytes()
    again = run_sbuf("plugin", "install", "codex", "--directory", str(target), cwd=tmp_path, env=env)
    assert again.returncode == 1 and "install codex and rerun" in again.stderr
    codex = target / "plugins" / "codex-plugin-stormbuffer"
    assert [path.name for path in (codex / "skills").iterdir()] == ["stormbuffer-global-memory"]
    assert (target / ".agents" / "plugins" / "marketplace.json").is_file()


def test_an_installed_wheel_installs_the_plugins(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp_path), str(ROOT)]
    subprocess.run(command, check=True, timeout=300)
    (wheel,) = tmp_path.glob("stormbuffer-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tree = "stormbuffer/plugin-tree"
    for name in (
        f"{tree}/.agents/plugins/marketplace.json",
        f"{tree}/plugins/codex-plugin-stormbuffer/.codex-plugin/plugin.json",
        f"{tree}/plugins/codex-plugin-stormbuffer/.mcp.json",
        f"{tree}/plugins/codex-plugin-stormbuffer/hooks/hooks.json",
        f"{tree}/plugins/codex-plugin-stormbuffer/hooks/lifecycle.mjs",
        f"{tree}/plugins/pi-plugin-stormbuffer/src/index.js",
    ):
        assert name in names
    # an installed wheel (shadowing the source tree) installs its own copy
    site = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(site), str(wheel)]
    subprocess.run(install, check=True, timeout=300)
    shipped = site / tree / "plugins" / "codex-plugin-stormbuffer" / "hooks" / "codex.mjs"
    shipped.write_text(shipped.read_text() + "// the wheel's copy\n")
    target = tmp_path / "installed"
    env = sbuf_env(tmp_path, PATH=NO_HOSTS, PYTHONPATH=str(site))
    cli = [sys.executable, "-c", "from stormbuffer.cli import main; main()", "plugin", "install", "codex"]
    done = subprocess.run([*cli, "--directory", str(target)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 1 and "install codex and rerun" in done.stderr, done.stderr
    copied = target / "plugins" / "codex-plugin-stormbuffer" / "hooks" / "codex.mjs"
    assert (
        copied.read_bytes()
        == (site / tree / "plugins" / "codex-plugin-stormbuffer" / "hooks" / "codex.mjs").read_bytes()
    )

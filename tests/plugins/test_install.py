"""`sbuf plugin install`: the installed layout, a host that is missing, and the wheel's copy of the plugins."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests import tools
from tests.helpers import run_sbuf, sbuf_env
from tests.plugins.conftest import PLUGINS, ROOT

NO_HOSTS = os.pathsep.join(["/usr/bin", "/bin"])


def _fake_host(directory: Path, name: str) -> None:
    """A `name` command that succeeds and does nothing."""
    script = directory / name
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)


@pytest.mark.parametrize("host", ["claude", "codex", "gemini", "opencode", "pi"])
def test_a_missing_host_cli_is_a_clear_error_before_anything_is_written(tmp_path: Path, host: str) -> None:
    target = tmp_path / "installed"
    env = sbuf_env(tmp_path, PATH=NO_HOSTS)
    done = run_sbuf("plugin", "install", host, "--directory", str(target), cwd=tmp_path, env=env)
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: `{host}` is not on PATH; install {host} and rerun"
    assert not target.exists()


def test_the_installed_layout(tmp_path: Path) -> None:
    target = tmp_path / "installed"
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    for name in ("claude", "codex", "gemini", "opencode", "pi"):
        _fake_host(hosts, name)
    env = sbuf_env(tmp_path, PATH=os.pathsep.join([str(hosts), NO_HOSTS]))
    done = run_sbuf("--project", "plugin", "install", "pi", "--directory", str(target), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    pi = target / "plugins" / "pi-plugin-stormbuffer"
    assert (pi / "src" / "index.js").read_bytes() == (
        PLUGINS / "pi-plugin-stormbuffer" / "src" / "index.js"
    ).read_bytes()
    assert (pi / "skills" / "stormbuffer-memory" / "SKILL.md").is_file()
    assert not (pi / "test").exists()
    lifecycle = (PLUGINS / "codex-plugin-stormbuffer" / "hooks" / "lifecycle.cjs").read_bytes()
    shared = target / "plugins" / "node_modules" / "codex-plugin-stormbuffer" / "hooks" / "lifecycle.cjs"
    assert shared.read_bytes() == lifecycle
    again = run_sbuf("plugin", "install", "codex", "--directory", str(target), cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    codex = target / "plugins" / "codex-plugin-stormbuffer"
    assert [path.name for path in (codex / "skills").iterdir()] == ["stormbuffer-global-memory"]
    assert (target / ".agents" / "plugins" / "marketplace.json").is_file()
    claude = run_sbuf("--project", "plugin", "install", "claude", "--directory", str(target), cwd=tmp_path, env=env)
    assert claude.returncode == 0, claude.stderr
    package = target / "plugins" / "claude-plugin-stormbuffer"
    # the shared modules arrive as files (a host copies a plugin without what its links point to)
    assert not (package / "hooks" / "lifecycle.cjs").is_symlink()
    assert (package / "hooks" / "lifecycle.cjs").read_bytes() == lifecycle
    client = (PLUGINS / "codex-plugin-stormbuffer" / "hooks" / "daemon.cjs").read_bytes()
    assert not (package / "hooks" / "daemon.cjs").is_symlink()
    assert (package / "hooks" / "daemon.cjs").read_bytes() == client
    assert [path.name for path in (package / "skills").iterdir()] == ["stormbuffer-memory"]
    assert (target / ".claude-plugin" / "marketplace.json").is_file()
    gemini = run_sbuf("plugin", "install", "gemini", "--directory", str(target), cwd=tmp_path, env=env)
    assert gemini.returncode == 0, gemini.stderr
    extension = target / "plugins" / "gemini-extension-stormbuffer"
    assert (extension / "hooks" / "command-hooks.cjs").read_bytes() == (
        PLUGINS / "codex-plugin-stormbuffer" / "hooks" / "command-hooks.cjs"
    ).read_bytes()
    assert [path.name for path in (extension / "skills").iterdir()] == ["stormbuffer-global-memory"]


def test_opencode_loads_the_installed_plugin_through_its_plugin_directory(tmp_path: Path) -> None:
    """The loader `sbuf plugin install opencode` writes imports the installed copy's plugin (run on Node)."""
    target = tmp_path / "installed"
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    _fake_host(hosts, "opencode")
    env = sbuf_env(tmp_path, PATH=os.pathsep.join([str(hosts), NO_HOSTS]), XDG_CONFIG_HOME=str(tmp_path / "config"))
    done = run_sbuf("plugin", "install", "opencode", "--directory", str(target), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    loader = tmp_path / "config" / "opencode" / "plugins" / "stormbuffer.js"
    script = f"const m = await import({str(loader)!r}); console.log(typeof m.StormbufferPlugin)"
    ran = subprocess.run([str(tools.node()), "--input-type=module", "-e", script], capture_output=True, text=True)
    assert ran.stdout.strip() == "function", ran.stderr


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
        f"{tree}/plugins/codex-plugin-stormbuffer/hooks/lifecycle.cjs",
        f"{tree}/plugins/pi-plugin-stormbuffer/src/index.js",
        f"{tree}/.claude-plugin/marketplace.json",
        f"{tree}/plugins/claude-plugin-stormbuffer/.claude-plugin/plugin.json",
        f"{tree}/plugins/claude-plugin-stormbuffer/hooks/lifecycle.cjs",
        f"{tree}/plugins/claude-plugin-stormbuffer/hooks/command-hooks.cjs",
        f"{tree}/plugins/gemini-extension-stormbuffer/gemini-extension.json",
        f"{tree}/plugins/gemini-extension-stormbuffer/hooks/lifecycle.cjs",
        f"{tree}/plugins/opencode-plugin-stormbuffer/stormbuffer.js",
        f"{tree}/plugins/opencode-plugin-stormbuffer/lifecycle.cjs",
    ):
        assert name in names
    # an installed wheel (shadowing the source tree) installs its own copy
    site = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(site), str(wheel)]
    subprocess.run(install, check=True, timeout=300)
    shipped = site / tree / "plugins" / "codex-plugin-stormbuffer" / "hooks" / "codex.cjs"
    shipped.write_text(shipped.read_text() + "// the wheel's copy\n")
    target = tmp_path / "installed"
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    _fake_host(hosts, "codex")
    env = sbuf_env(tmp_path, PATH=os.pathsep.join([str(hosts), NO_HOSTS]), PYTHONPATH=str(site))
    cli = [sys.executable, "-c", "from stormbuffer.cli import main; main()", "plugin", "install", "codex"]
    done = subprocess.run([*cli, "--directory", str(target)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    copied = target / "plugins" / "codex-plugin-stormbuffer" / "hooks" / "codex.cjs"
    assert (
        copied.read_bytes()
        == (site / tree / "plugins" / "codex-plugin-stormbuffer" / "hooks" / "codex.cjs").read_bytes()
    )

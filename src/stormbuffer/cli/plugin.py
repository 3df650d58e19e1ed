"""`sbuf plugin install HOST`: put a lifecycle plugin where its host can load it, then register it.

The host's CLI must be on PATH before anything is written. The shipped files (in the source tree,
or under `stormbuffer/plugin-tree/` in the wheel) are copied to `<data dir>/stormbuffer/plugins/`
in the layout of the source tree — the host's marketplace file (`.claude-plugin/` or
`.agents/plugins/`), its packages with links resolved (every package shares the Codex package's
lifecycle module), and `plugins/node_modules/codex-plugin-stormbuffer` so the Pi package finds
that module — with the selected scope's memory skill as each package's only skill. The host's own
CLI then registers the copy (`claude plugin marketplace add` + `claude plugin install`, `codex
plugin marketplace add` + `codex plugin add`, `gemini extensions install`, or `pi install`;
OpenCode has no such command, so a one-line loader goes into its plugin directory), so a host
never runs files from a Python installation that may change under it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import click

from ..core.errors import StoreError
from .context import current, fail
from .main import store_options
from .skill import SKILL_FILE, shipped_skill, skill_name

CODEX_PACKAGE = "codex-plugin-stormbuffer"
PI_PACKAGE = "pi-plugin-stormbuffer"
CLAUDE_PACKAGE = "claude-plugin-stormbuffer"
GEMINI_PACKAGE = "gemini-extension-stormbuffer"
OPENCODE_PACKAGE = "opencode-plugin-stormbuffer"
# OpenCode loads every module in its global plugin directory; this one re-exports the installed copy
OPENCODE_LOADER = Path("opencode", "plugins", "stormbuffer.js")
SOURCE_TREE = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Host:
    """What one host needs: its CLI, the packages and marketplace files to lay out, the host
    commands (`{root}`: the install directory) that register the installed copy, and those run
    first whose failure does not matter (removing an earlier registration)."""

    cli: str
    packages: tuple[str, ...]
    files: tuple[Path, ...]
    commands: tuple[tuple[str, ...], ...]
    cleanup: tuple[tuple[str, ...], ...] = ()
    env: tuple[tuple[str, str], ...] = ()


HOSTS: dict[str, Host] = {
    "claude": Host(
        "claude",
        (CLAUDE_PACKAGE,),
        (Path(".claude-plugin", "marketplace.json"),),
        (
            ("claude", "plugin", "marketplace", "add", "{root}"),
            ("claude", "plugin", "install", "stormbuffer@stormbuffer-source"),
        ),
    ),
    "codex": Host(
        "codex",
        (CODEX_PACKAGE,),
        (Path(".agents", "plugins", "marketplace.json"),),
        (
            ("codex", "plugin", "marketplace", "add", "{root}"),
            ("codex", "plugin", "add", "stormbuffer@stormbuffer-source"),
        ),
    ),
    # `--consent` and a trusted folder: the user asked for this install of Stormbuffer's own files
    "gemini": Host(
        "gemini",
        (GEMINI_PACKAGE,),
        (),
        (("gemini", "extensions", "install", "{root}/plugins/" + GEMINI_PACKAGE, "--consent"),),
        cleanup=(("gemini", "extensions", "uninstall", "stormbuffer"),),
        env=(("GEMINI_CLI_TRUST_WORKSPACE", "true"),),
    ),
    "opencode": Host("opencode", (OPENCODE_PACKAGE,), (), ()),
    "pi": Host("pi", (CODEX_PACKAGE, PI_PACKAGE), (), (("pi", "install", "{root}/plugins/" + PI_PACKAGE),)),
}


def _shipped(relative: Path) -> Path:
    """A shipped file or package: from the wheel's copy of the source layout, else the source tree."""
    packaged = Path(str(files("stormbuffer"))) / "plugin-tree"
    return (packaged if packaged.is_dir() else SOURCE_TREE) / relative


def _copy_package(name: str, root: Path, skill: str) -> None:
    """Copy package `name` (links resolved: packages share the lifecycle module) with only `skill`."""
    destination = root / "plugins" / name
    staging = destination.with_name(f".{name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    # the package's skills/ holds every scope's skill (for installs from a clone); here only the selected one
    skipped = shutil.ignore_patterns("test", "node_modules", "skills")
    shutil.copytree(_shipped(Path("plugins", name)), staging, ignore=skipped)
    skill_file = staging / "skills" / skill / SKILL_FILE
    skill_file.parent.mkdir(parents=True)
    skill_file.write_bytes(shipped_skill(skill))
    shutil.rmtree(destination, ignore_errors=True)
    os.replace(staging, destination)


def install_files(host: str, root: Path, skill: str) -> None:
    """Lay out the packages `host` needs under `root`, replacing an earlier install."""
    for name in HOSTS[host].packages:
        _copy_package(name, root, skill)
    for relative in HOSTS[host].files:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_shipped(relative), root / relative)
    link = root / "plugins" / "node_modules" / CODEX_PACKAGE
    link.parent.mkdir(exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(Path("..", CODEX_PACKAGE))


def _write_opencode_loader(root: Path) -> None:
    """`<config home>/opencode/plugins/stormbuffer.js`, re-exporting the installed plugin (atomically)."""
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    loader = config_home / OPENCODE_LOADER
    loader.parent.mkdir(parents=True, exist_ok=True)
    module = (root / "plugins" / OPENCODE_PACKAGE / "stormbuffer.js").as_uri()
    staging = loader.with_name(f".{loader.name}.new")
    staging.write_text(f"export {{ StormbufferPlugin }} from {json.dumps(module)};\n", encoding="utf-8")
    os.replace(staging, loader)


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A host command, without a terminal (a host never waits on a question)."""
    return subprocess.run(
        argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False, timeout=120
    )


@click.group("plugin", help="Install the lifecycle plugins shipped with Stormbuffer.")
@store_options
def plugin() -> None:
    pass


@plugin.command("install", help="Install the lifecycle plugin for HOST and register it with the host.")
@click.argument("host", type=click.Choice(sorted(HOSTS)))
@click.option("--directory", metavar="<DIRECTORY>", type=click.Path(file_okay=False, path_type=Path),
              help="Where to keep the installed plugin files (default: <data dir>/stormbuffer/plugins).")  # fmt: skip
@store_options
def install(host: str, directory: Path | None) -> None:
    cli = current()
    if shutil.which(HOSTS[host].cli) is None:
        fail(f"`{HOSTS[host].cli}` is not on PATH; install {host} and rerun")
    try:
        root = (directory or cli.dirs().data / "stormbuffer" / "plugins").absolute()
    except StoreError as exc:
        fail(str(exc))
    try:
        install_files(host, root, skill_name(cli.view))
    except OSError as exc:
        fail(f"could not install the {host} plugin into {root}: {exc.strerror or type(exc).__name__}")
    if host == "opencode":
        try:
            _write_opencode_loader(root)
        except OSError as exc:
            fail(f"could not register the opencode plugin: {exc.strerror or type(exc).__name__}")
    spec = HOSTS[host]
    env = {**os.environ, **dict(spec.env)}
    for command in spec.cleanup:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            _run([part.format(root=root) for part in command], env)
    for command in spec.commands:
        argv = [part.format(root=root) for part in command]
        try:
            done = _run(argv, env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            fail(f"could not run `{' '.join(argv)}` ({type(exc).__name__}); install {host} and rerun")
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            fail(f"`{' '.join(argv)}` failed: {detail[-1] if detail else f'exit status {done.returncode}'}")
    out = cli.out()
    click.echo(f"{out.success('Installed')} the Stormbuffer {host} plugin from {out.path(str(root))}")

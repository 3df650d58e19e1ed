"""`sbuf service print|install systemd|launchd`: run `sbuf serve` as a per-user service.

The systemd user unit and the launchd agent start this `sbuf` (its absolute path) with the selected
view (`--global` unless `--project` or `--local` is given; a project view runs in the current
directory) and the given address and port; logs go to the journal, or to ~/Library/Logs on macOS.
Standard output, where `serve` prints the review page's sign-in address with the user's credential,
is discarded, so the credential never reaches a log.
`install` writes the file where the service manager looks for it and prints the commands that
start it; it never runs them.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import click

from ..core.stores import View
from .context import current, fail
from .main import store_options
from .serve import LOOPBACK_ONLY, _address

UNIT_NAME = "stormbuffer-serve.service"
AGENT_LABEL = "dev.stormbuffer.serve"


def sbuf_executable() -> str:
    """The absolute path of the running `sbuf`, else the one on PATH."""
    running = Path(sys.argv[0])
    if running.name == "sbuf" and running.is_file():
        return str(running.absolute())
    found = shutil.which("sbuf")
    if found is None:
        fail("could not find the sbuf executable; run this command through the installed `sbuf`")
    return str(Path(found).absolute())


def serve_arguments(address: str, port: int) -> list[str]:
    return [sbuf_executable(), f"--{current().view.value}", "serve", "--bind", address, "--port", str(port)]


def working_directory() -> str | None:
    """The directory a project or local view's service runs in (its store is found from there)."""
    return None if current().view is View.GLOBAL else str(current().cwd)


def _systemd_word(word: str) -> str:
    """One ExecStart word, quoted for systemd (which also expands `%` specifiers and `$` variables)."""
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def systemd_unit(address: str, port: int) -> str:
    lines = [
        "[Unit]",
        "Description=Stormbuffer local HTTP API (sbuf serve)",
        "Documentation=man:sbuf-serve(1) man:sbuf-service(1)",
        "",
        "[Service]",
        "Type=exec",
        "ExecStart=" + " ".join(_systemd_word(word) for word in serve_arguments(address, port)),
    ]
    if (directory := working_directory()) is not None:
        lines.append(f"WorkingDirectory={_systemd_word(directory)}")
    lines += [
        "Environment=NO_COLOR=1",
        "StandardOutput=null",
        "Restart=on-failure",
        "RestartSec=5",
        "TimeoutStopSec=10",
        "",
        "[Install]",
        "WantedBy=default.target",
    ]
    return "\n".join(lines) + "\n"


def launchd_agent(address: str, port: int) -> str:
    import plistlib

    agent: dict[str, object] = {
        "Label": AGENT_LABEL,
        "ProgramArguments": serve_arguments(address, port),
        "EnvironmentVariables": {"NO_COLOR": "1"},
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ProcessType": "Background",
        "StandardOutPath": "/dev/null",
        "StandardErrorPath": str(Path.home() / "Library" / "Logs" / "stormbuffer-serve.log"),
    }
    if (directory := working_directory()) is not None:
        agent["WorkingDirectory"] = directory
    return plistlib.dumps(agent).decode()


MANAGERS = {"systemd": systemd_unit, "launchd": launchd_agent}


def service_file(manager: str) -> Path:
    """Where the user's service manager looks for the file."""
    if manager == "launchd":
        return Path.home() / "Library" / "LaunchAgents" / f"{AGENT_LABEL}.plist"
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "systemd" / "user" / UNIT_NAME


def start_commands(manager: str, path: Path) -> list[str]:
    if manager == "launchd":
        return [f"launchctl bootstrap gui/$(id -u) {path}", f"launchctl kickstart gui/$(id -u)/{AGENT_LABEL}"]
    return ["systemctl --user daemon-reload", f"systemctl --user enable --now {UNIT_NAME}"]


@click.group("service", help="Run `sbuf serve` as a per-user service (a systemd user unit or a launchd agent).")
@store_options
def service() -> None:
    pass


def _service_options(function: Callable[..., None]) -> Callable[..., None]:
    function = click.option("--port", type=click.IntRange(1, 65535), default=7342, show_default=True,
                            help="TCP port the service listens on.")(function)  # fmt: skip
    function = click.option("--bind", "address", default="127.0.0.1", show_default=True, metavar="IP",
                            callback=_address, help="Loopback IP address the service binds.")(function)  # fmt: skip
    function = click.argument("manager", type=click.Choice(list(MANAGERS)))(function)
    return store_options(function)


def _rendered(manager: str, address: str, port: int) -> str:
    from ..adapters.http.server import is_loopback

    if not is_loopback(address):
        fail(LOOPBACK_ONLY)
    return MANAGERS[manager](address, port)


@service.command("print", help="Print the service file for MANAGER (systemd or launchd).")
@_service_options
def print_service(manager: str, address: str, port: int) -> None:
    click.echo(_rendered(manager, address, port), nl=False)


@service.command("install", help="Write the service file for MANAGER where it looks, and print how to start it.")
@click.option("--force", is_flag=True, help="Replace an existing service file.")
@_service_options
def install_service(manager: str, address: str, port: int, force: bool) -> None:
    from ..core.atomic import write_atomic

    content = _rendered(manager, address, port)
    path = service_file(manager)
    if path.exists() and not force:
        fail(f"{path.name} already exists; pass --force to replace it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, content.encode())
    except OSError as exc:
        fail(f"could not write {path.name}: {exc.strerror or type(exc).__name__}")
    out = current().out()
    click.echo(f"{out.success('Installed')} {out.path(str(path))}")
    click.echo("Start it with:")
    for line in start_commands(manager, path):
        click.echo(f"  {line}")

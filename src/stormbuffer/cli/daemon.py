"""`sbuf daemon status|stop`: the user's memory daemon behind `stormbuffer-mcp` and `sbuf invoke`."""

from __future__ import annotations

import json

import click

from .context import current
from .main import command

NOT_RUNNING = "No daemon is running."


@click.group("daemon", help="Inspect or stop the memory daemon that serves MCP sessions and invoke calls.")
def daemon() -> None:
    pass


@daemon.command("status", help="Show the running daemon (exit 1 when none runs).")
@click.option("--json", "as_json", is_flag=True, help="Print the status as one JSON object.")
def status(as_json: bool) -> None:
    from ..daemon.relay import ask
    from ..daemon.runtime import install_identity, runtime

    env = current().env
    reply = ask("status", env)
    if reply is None or reply.get("ok") is not True:
        click.echo(json.dumps({"running": False}) if as_json else NOT_RUNNING)
        raise click.exceptions.Exit(1)
    place = runtime(env)
    info = {key: value for key, value in reply.items() if key != "ok"}
    info.update(
        running=True, socket=str(place.socket) if place else None, current=reply.get("install") == install_identity(env)
    )
    if as_json:
        click.echo(json.dumps(info, sort_keys=True))
        return
    out = current().out()
    rows = [("Process", str(info["pid"])), ("Version", str(info["version"])),
            ("This install", "yes" if info["current"] else "no (the next session replaces it)"),
            ("Sessions", str(info["sessions"])), ("Served", str(info["served"])),
            ("Uptime", f"{info['uptime_s']} s"), ("Idle exit", f"{info['idle_exit_s']:g} s"),
            ("Memory", f"{info['rss_kib']} KiB"), ("Open files", str(info["open_files"])),
            ("Socket", str(info["socket"])), ("Log", str(place.log) if place else "")]  # fmt: skip
    for name, value in rows:
        click.echo(out.field(name, value))


@daemon.command("stop", help="Stop the running daemon; open sessions end (their hosts see an error).")
def stop() -> None:
    from ..daemon.relay import stop as stop_daemon

    pid = stop_daemon(current().env)
    click.echo(NOT_RUNNING if pid is None else f"Stopped the daemon (process {pid}).")


__all__ = ["command", "daemon"]

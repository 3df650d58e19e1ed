"""`sbuf`: the entry point. Subcommands load lazily so that small commands start fast."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from .. import __version__
from ..core.errors import StormbufferError
from ..core.stores import View
from .context import Cli, CommandFailed, current

# name -> "module:attribute" (relative to stormbuffer.cli)
COMMANDS: dict[str, str] = {
    "init": "records:init",
    "root": "records:root",
    "status": "records:status",
    "add": "records:add",
    "propose": "records:propose",
    "approve": "records:approve",
    "reject": "records:reject",
    "edit": "records:edit",
    "show": "records:show",
    "list": "records:list_records",
    "supersede": "records:supersede",
    "archive": "records:archive",
    "restore": "records:restore",
    "forget": "records:forget",
    "inbox": "review:inbox",
    "audit": "review:audit",
    "mcp": "mcp:mcp",
    "serve": "serve:serve",
    "auth": "auth:auth",
    "team": "team:team",
    "export": "backup:export",
    "verify-export": "backup:verify_export",
    "import": "backup:import_records",
    "destroy-store": "backup:destroy",
    "invoke": "protocol:invoke",
    "skill": "skill:skill",
    "plugin": "plugin:plugin",
    "sync": "index:sync",
    "watch": "index:watch",
    "reindex": "index:reindex",
    "doctor": "index:doctor",
    "gc": "index:gc",
    "search": "index:search",
    "context": "index:context",
    "conformance": "conformance:conformance",
    "daemon": "daemon:daemon",
    "evaluate": "evaluate:evaluate",
    "completion": "completion:completion",
    "service": "service:service",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """A mistyped subcommand is a usage error suggesting the closest one."""
        name = args[0] if args else ""
        if name in COMMANDS or name.startswith("-"):
            return super().resolve_command(ctx, args)
        import difflib

        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f". Did you mean {close[0]!r}?" if close else ""
        raise click.UsageError(f"unrecognized subcommand {name!r}{hint}", ctx)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attribute = target.split(":")
        command = getattr(importlib.import_module(f"{__package__}.{module}"), attribute)
        assert isinstance(command, click.Command)
        return command


def _select_view(ctx: click.Context, flags: dict[str, bool]) -> None:
    chosen = [name for name, on in flags.items() if on]
    obj = ctx.ensure_object(Cli)
    if len(chosen) > 1 or (chosen and getattr(obj, "_view_set", False) and View(chosen[0]) is not obj.view):
        raise click.UsageError("select only one of --global, --project, or --local", ctx)
    if chosen:
        obj.view = View(chosen[0])
        obj._view_set = True  # type: ignore[attr-defined]


def store_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The global options, accepted before or after the subcommand."""

    def view_callback(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
        if value:
            _select_view(ctx, {str(param.name): True})
        return value

    def colour_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is not None:
            ctx.ensure_object(Cli).colour = value
        return value

    def lock_wait_callback(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
        if value is not None:
            ctx.ensure_object(Cli).lock_wait = value
        return value

    options = [
        click.option("-g", "--global", "global", is_flag=True, expose_value=False, callback=view_callback,
                     help="Use the global store (the default)."),
        click.option("--project", is_flag=True, expose_value=False, callback=view_callback,
                     help="Use the nearest project store plus applicable global memory."),
        click.option("--local", is_flag=True, expose_value=False, callback=view_callback,
                     help="Use the nearest project store only; never open the global store."),
        click.option("--color", type=click.Choice(["auto", "always", "never"]), default=None, expose_value=False,
                     callback=colour_callback, help="Colour for human output (default auto)."),
        click.option("--lock-wait", type=click.FloatRange(0, 3600), default=None, expose_value=False,
                     callback=lock_wait_callback, metavar="SECONDS",
                     help="How long a write waits for a store another process is changing "
                          "(default $STORMBUFFER_LOCK_WAIT or 5)."),
    ]  # fmt: skip
    for option in reversed(options):
        function = option(function)
    return function


def command(name: str | None = None, **kwargs: Any) -> Callable[[Callable[..., Any]], click.Command]:
    """A subcommand that also accepts the global options after its name."""

    def decorate(function: Callable[..., Any]) -> click.Command:
        return click.command(name, **kwargs)(store_options(function))

    return decorate


@click.group(
    cls=LazyGroup,
    invoke_without_command=False,
    no_args_is_help=True,
    context_settings={"color": True},  # `Style` decides about colour; click must not strip it
    help="A memory store for facts, decisions, procedures, and checkpoints.\n\n"
    "Stormbuffer keeps memories in readable, indexed Markdown.",
)
@click.version_option(__version__, "-V", "--version", prog_name="sbuf", message="%(prog)s %(version)s")
@store_options
@click.pass_context
def cli(ctx: click.Context) -> None:
    ctx.ensure_object(Cli)


def main(argv: list[str] | None = None) -> None:
    """Run `sbuf`; expected failures print one `error:` line, never a traceback."""
    if "_SBUF_COMPLETE" in os.environ:  # a shell asking for completions: add PowerShell to click's shells
        from .completion import register_shells

        register_shells()
    try:
        # Without standalone mode click returns the code of `ctx.exit(n)` (an `Exit`) instead of raising it.
        status = cli.main(args=argv, prog_name="sbuf", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help(), err=True)
        sys.exit(2)
    except click.UsageError as exc:
        _show_usage_error(exc)
        sys.exit(exc.exit_code)
    except CommandFailed as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        CommandFailed(exc.format_message()).show()
        sys.exit(exc.exit_code)
    except click.Abort as exc:  # click's form of Ctrl-C, or of end of input at a prompt
        if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
            sys.exit(130)
        CommandFailed("cancelled").show()
        sys.exit(1)
    except StormbufferError as exc:
        CommandFailed(str(exc)).show()
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(1)
    except OSError as exc:
        CommandFailed(f"{exc.strerror or type(exc).__name__}").show()
        sys.exit(1)
    sys.exit(status if isinstance(status, int) else 0)


def _show_usage_error(exc: click.UsageError) -> None:
    """`error: <message>`, the usage line, and where to read more (exit 2), as for every other error."""
    message = exc.format_message()
    CommandFailed(message[:1].lower() + message[1:]).show()  # click's "No such option" as "no such option"
    if exc.ctx is not None:
        click.echo(f"\n{exc.ctx.get_usage()}\n\nFor more information, try '{exc.ctx.command_path} --help'.", err=True)


__all__ = ["COMMANDS", "cli", "command", "current", "main"]

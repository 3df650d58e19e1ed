"""`sbuf [view] serve [--bind IP] [--port N]`: the local HTTP API on a loopback address.

Every request needs the user's credential (`sbuf auth token`, made here on first use). Once the
server listens, the review page's sign-in address, which carries the credential, is printed on
standard output (the log on standard error never holds it)."""

from __future__ import annotations

import ipaddress

import click

from ..core.errors import NotInitialized, StormbufferError
from .context import current, fail
from .main import command

LOOPBACK_ONLY = "serve only accepts loopback addresses; remote binding requires authentication and a threat model"


def _address(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return ipaddress.ip_address(value).compressed
    except ValueError:
        raise click.BadParameter("must be an IP address", ctx, param) from None


@command(
    "serve",
    help="Serve the local HTTP API (JSON over loopback HTTP) and the review page for the selected store; "
    "clients send the token `sbuf auth token` prints.",
)
@click.option(
    "--bind",
    "address",
    default="127.0.0.1",
    show_default=True,
    metavar="IP",
    callback=_address,
    help="Loopback IP address to bind. Non-loopback addresses are refused.",
)
@click.option("--port", type=click.IntRange(0, 65535), default=7342, show_default=True,
              help="TCP port to listen on (0 picks a free port; the log says which).")  # fmt: skip
def serve(address: str, port: int) -> None:
    from ..adapters.http.server import bind, display_address, is_loopback, log_to_stderr

    if not is_loopback(address):
        fail(LOOPBACK_ONLY)
    cli = current()
    from ..adapters.http.context import StoreContext
    from ..index.freshness import FreshnessRegistry
    from ..index.readers import keep_warm

    freshness = FreshnessRegistry()
    keep_warm()
    try:
        try:
            store = StoreContext.open(cli.view, cli.cwd, cli.env, freshness)
        except NotInitialized:
            fail("could not start server: store is not initialized")
        except StormbufferError as exc:
            fail(f"could not start server: {exc}")
        except OSError as exc:
            fail(f"could not start server: {exc.strerror or type(exc).__name__}")
        from ..auth.credential import CredentialError, ensure_token

        try:
            token = ensure_token(cli.env)
        except CredentialError as exc:
            fail(f"could not start server: {exc}")
        except OSError as exc:
            fail(f"could not start server: could not create the credential: {exc.strerror or type(exc).__name__}")
        try:
            sock = bind(address, port)
        except OSError as exc:
            fail(
                f"could not bind local server to {display_address(address, port)}: {exc.strerror or type(exc).__name__}"
            )
        from ..adapters.http import Credentials
        from ..adapters.http.server import serve as run

        log_to_stderr()
        from ..adapters.web import routes

        credentials = Credentials(token)
        click.echo(f"Review page: http://{display_address(*sock.getsockname()[:2])}/sign-in?token={token}")
        run(store, sock, credentials, routes())
    finally:
        freshness.close()

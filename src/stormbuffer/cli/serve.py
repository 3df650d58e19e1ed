"""`sbuf [view] serve [--team] [--bind IP] [--port N]`: the HTTP API of the selected store.

Every request needs the user's credential (`sbuf auth token`, made here on first use). Once the
server listens, the review page's sign-in address, which carries the credential, is printed on
standard output (the log on standard error never holds it).

With `--team`, every request needs one of the store's team tokens instead (`sbuf team token`), on
loopback too; the selected store is served alone (the project view's global store is not), MCP over
Streamable HTTP is served at `/mcp` beside the API, and the review page takes a team token on its
sign-in form. A team server may bind a non-loopback address only over TLS (`--tls-cert`,
`--tls-key`) or behind an HTTPS reverse proxy (`--behind-proxy IP`); plain HTTP there is refused
before anything is bound. `--workers N` serves a team from N processes sharing the socket."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

import click

from ..core.errors import NotInitialized, StormbufferError
from ..core.stores import View
from .context import current, fail
from .main import command

if TYPE_CHECKING:
    import socket

    from ..adapters.http.ratelimit import Rate
    from ..auth.oidc import OidcIssuer

LOOPBACK_ONLY = "serve only accepts loopback addresses; a team server (`--team`) may bind others over TLS"
PLAIN_HTTP = (
    "a team server refuses plain HTTP on a non-loopback address: pass --tls-cert and --tls-key, "
    "or --behind-proxy with the address of the HTTPS proxy in front of it, or bind a loopback address"
)
TLS_PAIR = "--tls-cert and --tls-key go together"
MAX_WORKERS = 64


def _optional_address(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else _address(ctx, param, value)


def _rate(ctx: click.Context, param: click.Parameter, value: str | None) -> Rate | None | Literal[False]:
    """The parsed `--rate-limit` (None: off), False when not given."""
    if value is None:
        return False
    from ..adapters.http.ratelimit import Rate

    try:
        return Rate.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _host_names(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    from ..adapters.http.team import host_name

    try:
        return tuple(host_name(name) for name in value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _public_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from ..adapters.http.team import public_url

    try:
        return None if value is None else public_url(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _issuer(url: str, audience: str, scope: str) -> OidcIssuer:
    from ..auth.oidc import OidcError, OidcIssuer

    try:
        return OidcIssuer.discover(url, audience, scope)
    except OidcError as exc:
        fail(f"could not start server: {exc}")


def _retention(ctx: click.Context, param: click.Parameter, value: str | None) -> timedelta | None:
    from ..auth.tokens import TokenError, parse_expiry

    try:
        return None if value is None else parse_expiry(value)
    except TokenError:
        raise click.BadParameter("must be a number of days, hours or minutes (`90d`, `12h`, `30m`) or `never`",
                                 ctx, param) from None  # fmt: skip


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
    help="IP address to bind: loopback, or any with --team over TLS or behind an HTTPS proxy.",
)
@click.option("--port", type=click.IntRange(0, 65535), default=7342, show_default=True,
              help="TCP port to listen on (0 picks a free port; the log says which).")  # fmt: skip
@click.option("--team", is_flag=True, help="Serve a team: every request needs a team token (`sbuf team token`).")
@click.option("--tls-cert", type=click.Path(dir_okay=False), metavar="FILE", help="TLS certificate (PEM), with --team.")
@click.option("--tls-key", type=click.Path(dir_okay=False), metavar="FILE", help="TLS private key (PEM), with --team.")
@click.option("--behind-proxy", "proxy", metavar="IP", callback=_optional_address,
              help="With --team: serve only forwarded HTTPS requests from the reverse proxy at IP.")  # fmt: skip
@click.option("--rate-limit", "rate", metavar="N/UNIT", callback=_rate,
              help="With --team: requests per token per s, min or hour, or off [default: 600/min].")  # fmt: skip
@click.option("--allow-host", "hosts", multiple=True, metavar="NAME", callback=_host_names,
              help="With --team: also answer requests whose Host is NAME (a DNS name); repeatable.")  # fmt: skip
@click.option("--public-url", metavar="URL", callback=_public_url,
              help="With --team: the server's address as clients know it (https://NAME[:PORT]).")  # fmt: skip
@click.option("--audit-retention", "retention", metavar="DURATION", callback=_retention,
              help="With --team: drop audit entries older than `90d`, `12h`, `30m`… [default: never].")  # fmt: skip
@click.option("--oidc-issuer", metavar="URL", help="With --team: also take JWTs of this OpenID Connect issuer.")
@click.option("--oidc-audience", metavar="AUD", help="With --oidc-issuer: the audience its JWTs must name.")
@click.option("--workers", type=click.IntRange(1, MAX_WORKERS), default=1, show_default=True, metavar="N",
              help="With --team: serve from N processes (up to the number of cores).")  # fmt: skip
def serve(address: str, port: int, team: bool, tls_cert: str | None, tls_key: str | None, proxy: str | None,
          rate: Rate | None | Literal[False], hosts: tuple[str, ...], public_url: str | None,
          retention: timedelta | None, oidc_issuer: str | None, oidc_audience: str | None,
          workers: int) -> None:  # fmt: skip
    from ..adapters.http.server import bind, display_address, is_loopback, log_to_stderr

    if (tls_cert is None) != (tls_key is None):
        fail(TLS_PAIR)
    tls = (tls_cert, tls_key) if tls_cert and tls_key else None
    if (tls or proxy) and not team:
        fail("TLS and --behind-proxy are for a team server: add --team")
    if (rate is not False or hosts or public_url or retention or oidc_issuer or oidc_audience or workers > 1) and (
        not team
    ):
        fail(
            "--rate-limit, --allow-host, --public-url, --audit-retention, --oidc-… and --workers are for a team "
            "server: add --team"
        )
    if (oidc_issuer is None) != (oidc_audience is None) or oidc_audience == "":
        fail("--oidc-issuer and --oidc-audience go together")
    if tls and proxy:
        fail("a server behind a proxy leaves TLS to it: pass --behind-proxy or --tls-cert/--tls-key, not both")
    if not is_loopback(address) and (not team or (tls is None and proxy is None)):
        fail(PLAIN_HTTP if team else LOOPBACK_ONLY)
    cli = current()
    from ..adapters.http.context import StoreContext
    from ..index.freshness import FreshnessRegistry
    from ..index.readers import keep_warm

    freshness = FreshnessRegistry()
    keep_warm()
    try:
        try:
            store = StoreContext.open(_served_view(cli.view, team), cli.cwd, cli.env, freshness)
        except NotInitialized:
            fail("could not start server: store is not initialized")
        except StormbufferError as exc:
            fail(f"could not start server: {exc}")
        except OSError as exc:
            fail(f"could not start server: {exc.strerror or type(exc).__name__}")
        token = None if team else _local_token(cli.env)
        try:
            sock = bind(address, port)
        except OSError as exc:
            fail(
                f"could not bind local server to {display_address(address, port)}: {exc.strerror or type(exc).__name__}"
            )
        from ..adapters.http import Credentials
        from ..adapters.http.server import loopback_server
        from ..adapters.web import routes

        log_to_stderr()
        shown = display_address(*sock.getsockname()[:2])
        if token is None:
            from ..auth.tokens import TeamTokens

            url = f"{'https' if tls else 'http'}://{shown}"
            click.echo(f"Team server: {url} (clients send a team token; MCP at {url}/mcp)")
            from ..adapters.http.team import TeamSettings

            settings = TeamSettings(hosts=hosts, public_url=public_url, audit_retention=retention, workers=workers)
            settings = settings if rate is False else dataclasses.replace(settings, rate=rate)
            issuer = _issuer(oidc_issuer, oidc_audience, store.scope) if oidc_issuer and oidc_audience else None

            pages = routes()  # made before any fork: every worker signs the page's forms alike
            from ..adapters.http.worker_memory import bound_memory
            from ..auth.shared import reset

            def serve_team(worker: int | None = None, channel: socket.socket | None = None) -> None:
                """The team server in this process: the one, or worker `worker` of several."""
                bound_memory()
                credentials = Credentials.for_team(TeamTokens(store.selected), public_url, issuer, workers > 1)
                loopback_server(store, sock, credentials, pages, tls, proxy, settings, worker, channel).run([sock])

            try:
                if workers > 1:
                    reset(store.selected.root)
                store.prepare(workers)
            except OSError as exc:
                fail(f"could not start server: {exc.strerror or type(exc).__name__}")
            if workers == 1:
                serve_team()
                return
            from ..adapters.http.workers import serve_forked

            raise SystemExit(serve_forked(workers, sock, serve_team))
        click.echo(f"Review page: http://{shown}/sign-in?token={token}")
        loopback_server(store, sock, Credentials(token), routes()).run([sock])
    finally:
        freshness.close()


def _served_view(view: View, team: bool) -> View:
    """A team server serves the selected store alone: never the global store of the user running it."""
    return View.LOCAL if team and view is View.PROJECT else view


def _local_token(env: Mapping[str, str]) -> str:
    """The user's credential, made on first use."""
    from ..auth.credential import CredentialError, ensure_token

    try:
        return ensure_token(env)
    except CredentialError as exc:
        fail(f"could not start server: {exc}")
    except OSError as exc:
        fail(f"could not start server: could not create the credential: {exc.strerror or type(exc).__name__}")

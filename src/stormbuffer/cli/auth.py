"""`sbuf auth token`: the local credential that `sbuf serve` asks its clients for."""

from __future__ import annotations

import click

from .context import current, fail


@click.group("auth", help="Manage the credential of the local doors (`sbuf serve`).")
def auth() -> None:
    pass


@auth.command("token", help="Print the local credential (made on first use; keep it private).")
def token() -> None:
    from ..auth.credential import CredentialError, ensure_token

    try:
        secret = ensure_token(current().env)
    except CredentialError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"could not create the credential: {exc.strerror or type(exc).__name__}")
    click.echo(secret)

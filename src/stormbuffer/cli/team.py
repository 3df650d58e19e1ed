"""`sbuf [view] team token create|list|revoke|rotate`, `sbuf [view] team scope label|list` and `sbuf [view]
team audit`: the principals of a team server (`sbuf serve --team`), the names of its scopes, and
what they did.

Tokens and the audit trail live with the selected store (`auth.tokens`, `auth.audit`: files in its
directory, or tables of its PostgreSQL database); `create` and `rotate` print the token once, as
their last line of output, and nothing keeps it but a hash.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from ..auth import Role
from .context import current, fail
from .team_database import database

if TYPE_CHECKING:
    from ..auth.tokens import TeamToken, TeamTokens

ROLES = [role.name.lower() for role in Role]


@click.group("team", help="Manage the team server of the selected store (`sbuf serve --team`).")
def team() -> None:
    pass


team.add_command(database)


@team.group("token", help="Create, list, revoke and rotate the team tokens of the selected store.")
def token() -> None:
    pass


def _tokens() -> TeamTokens:
    from ..auth.tokens import TeamTokens
    from ..core.errors import NotInitialized

    store = current().store()
    if not store.is_initialized():
        raise NotInitialized()
    return TeamTokens(store)


@token.command("create", help="Make a token; it is printed once, on the last line. Keep it secret.")
@click.option("--name", required=True, help="Who holds it: the actor of everything it writes.")
@click.option(
    "--role", type=click.Choice(ROLES), required=True, help="What it may do, each role including the one before."
)
@click.option("--scope", "scopes", multiple=True, metavar="SCOPE",
              help="A record scope it may touch (repeatable; default: the selected store's).")  # fmt: skip
@click.option("--expires", default="90d", show_default=True, help="Lifetime: `90d`, `12h`, `30m` or `never`.")
def create(name: str, role: str, scopes: tuple[str, ...], expires: str) -> None:
    from ..auth.tokens import TokenError, parse_expiry
    from ..core.scopes import parse_scope
    from ..core.stores import record_scope

    tokens = _tokens()
    try:
        lifetime = parse_expiry(expires)
        chosen = tuple(parse_scope(scope) for scope in scopes) or (record_scope(tokens.paths),)
        secret = tokens.create(name, Role[role.upper()], chosen, lifetime)
    except ValueError as exc:
        fail(f"invalid scope: {exc}")
    except TokenError as exc:
        fail(str(exc))
    click.echo(f"Created {role} token {name} for {', '.join(chosen)}; it is shown once, below.")
    click.echo(secret)


@token.command("list", help="The store's tokens, without secrets.")
@click.option("--json", "as_json", is_flag=True, help="Emit a JSON array.")
def list_tokens(as_json: bool) -> None:
    from ..auth.tokens import now, render_time

    if as_json:
        click.echo(json.dumps([entry.to_json() for entry in _entries()], ensure_ascii=False))
        return
    for entry in _entries():
        until = f"until {render_time(entry.expires_at)}" if entry.expires_at else "no expiry"
        state = entry.state(now())
        click.echo(f"{entry.name}  {entry.role.name.lower()}  {state}  {until}  {' '.join(entry.scopes)}")


@token.command("revoke", help="Revoke the token named NAME; requests with it are refused at once.")
@click.argument("name")
def revoke(name: str) -> None:
    from ..auth.tokens import TokenError

    try:
        _tokens().revoke(name)
    except TokenError as exc:
        fail(str(exc))
    click.echo(f"Revoked {name}.")


@token.command(
    "rotate",
    help="Replace the token named NAME by a new one with its role, scopes and lifetime (from now); "
    "the old one is refused at once. The new one is printed once, on the last line.",
)
@click.argument("name")
def rotate(name: str) -> None:
    from ..auth.tokens import TokenError

    try:
        secret = _tokens().rotate(name)
    except TokenError as exc:
        fail(str(exc))
    click.echo(f"Rotated {name}: the old token is refused from now on; the new one is shown once, below.")
    click.echo(secret)


@team.group("scope", help="Name the record scopes of the selected store's team for people.")
def scope() -> None:
    pass


@scope.command("label", help="Show SCOPE (`global`, `project:<uuid>`) as LABEL on the review page.")
@click.argument("scope_name", metavar="SCOPE")
@click.argument("label")
def label(scope_name: str, label: str) -> None:
    from ..auth.labels import LabelError, ScopeLabels

    try:
        ScopeLabels(_tokens().paths).set(scope_name, label)
    except ValueError as exc:
        fail(f"invalid scope: {exc}")
    except LabelError as exc:
        fail(str(exc))
    click.echo(f"{scope_name} is shown as {label}.")


@scope.command("list", help="The scope labels of the selected store's team.")
def list_labels() -> None:
    from ..auth.labels import LabelError, ScopeLabels

    try:
        labels = ScopeLabels(_tokens().paths).read()
    except LabelError as exc:
        fail(str(exc))
    for scope_name, text in labels.items():
        click.echo(f"{scope_name}  {text}")


def _entries() -> list[TeamToken]:
    from ..auth.tokens import TokenError

    try:
        return _tokens().entries()
    except TokenError as exc:
        fail(str(exc))


@team.command("audit", help="Who read or wrote which records through the team server, oldest first.")
@click.option("--who", metavar="NAME", help="Only this principal's requests.")
@click.option("--record", metavar="ID", help="Only requests that named, returned or wrote this record.")
@click.option(
    "--since", metavar="WHEN", help="From this time on: `2026-12-01`, `2026-12-01T09:30:00Z`, or `24h`, `7d` ago."
)
@click.option("--json", "as_json", is_flag=True, help="Emit JSON Lines, one entry a line.")
def audit(who: str | None, record: str | None, since: str | None, as_json: bool) -> None:
    from ..auth.audit import Filter
    from ..auth.storage import audit_trail

    wanted = Filter(who, record, _since(since) if since else None)
    for entry in audit_trail(_tokens().paths).entries(wanted):
        if as_json:
            click.echo(json.dumps(entry, ensure_ascii=False))
            continue
        records = " ".join(entry.get("records", ())) or "-"
        receipt = f"  receipt {entry['receipt']}" if entry.get("receipt") else ""
        who = entry.get("who") or "(no valid token)"
        operation = entry.get("operation") or entry.get("request")
        click.echo(
            f"{entry.get('at')}  {who}  {entry.get('door')}  {operation}  {entry.get('status')}  {records}{receipt}"
        )


def _since(text: str) -> datetime:
    """An absolute time (UTC unless it says otherwise), or a duration before now."""
    from ..auth.tokens import TokenError, now, parse_expiry

    try:
        ago = parse_expiry(text)
    except TokenError:
        ago = None
    if ago is not None:
        return now() - ago
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        fail("--since must be a date, a time (`2026-12-01T09:30:00Z`) or a duration (`24h`, `7d`)")
    return found if found.tzinfo is not None else found.replace(tzinfo=UTC)

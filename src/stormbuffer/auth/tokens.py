"""Team tokens: named bearer credentials of a store, each a principal of the team server.

A token reads `sbt_<id>_<secret>`: `id` (12 hex digits) is not secret and finds the entry, the
secret is 256 random bits. Only the SHA-256 of the whole token is kept, compared in constant time.
Each entry names its holder (the `actor` of what it writes), its role, its scopes, its audience
(the store it was made for: its record scope), when it was made, when it expires and, once
revoked, when. A token is accepted only by servers of its audience's store; an entry made before
audiences were kept belongs to the store that holds it.

The entries live with the store (`storage.token_storage`): a directory store keeps them in
`<store>/team/tokens.toml` (`TokenFile`: directory 0700, file 0600, ignored by the store's
`.gitignore` like everything outside `records/`, replaced atomically under the store's mutation
lock), a PostgreSQL store in its database. Either way every process serving the store sees the
same tokens, and a revocation at once.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from stormbuffer.core.atomic import write_atomic
from stormbuffer.core.codec import toml_string
from stormbuffer.core.errors import StormbufferError
from stormbuffer.core.locks import exclusive_lock
from stormbuffer.core.stores import StorePaths, record_scope

from .principals import Principal, Role
from .storage import token_storage

TEAM_DIR = "team"
TOKENS_FILE = "tokens.toml"
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
RESERVED_NAMES = frozenset({"agent", "human", "inference"})  # actors the protocol itself uses
_TOKEN = re.compile(r"sbt_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
_DURATION = re.compile(r"([1-9][0-9]{0,4})([dhm])")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}
LOCK_WAIT_S = 10.0


class TokenError(StormbufferError):
    """A token cannot be made, found or revoked; the message never holds a secret."""


@dataclass(frozen=True)
class TeamToken:
    """One entry of `tokens.toml` (never the token itself)."""

    name: str
    id: str
    digest: str  # SHA-256 of the token, hex
    role: Role
    scopes: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None = None
    audience: str | None = None  # the record scope of the store it was made for; None: made before audiences

    def state(self, now: datetime) -> str:
        """`active`, `expired` or `revoked`."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return "active"

    def principal(self) -> Principal:
        return Principal(self.name, self.role, frozenset(self.scopes), "program")

    def to_json(self) -> dict[str, object]:
        """What `sbuf team token list --json` shows: everything but the digest."""
        return {
            "name": self.name, "id": self.id, "role": self.role.name.lower(), "scopes": list(self.scopes),
            "created_at": render_time(self.created_at), "expires_at": render_time(self.expires_at),
            "revoked_at": render_time(self.revoked_at), "state": self.state(now()), "audience": self.audience,
        }  # fmt: skip


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def parse_expiry(text: str) -> timedelta | None:
    """`90d`, `12h`, `30m`, or `never` (None)."""
    if text == "never":
        return None
    found = _DURATION.fullmatch(text)
    if found is None:
        raise TokenError("expiry must be a number of days, hours or minutes (`90d`, `12h`, `30m`) or `never`")
    return timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


class TeamTokens:
    """The tokens of one store: made, checked, revoked and rotated here, kept where its storage says."""

    def __init__(self, paths: StorePaths) -> None:
        self.paths = paths
        self.audience = record_scope(paths)
        self.storage = token_storage(paths)

    def entries(self) -> list[TeamToken]:
        return self.storage.entries()

    def create(self, name: str, role: Role, scopes: tuple[str, ...], lifetime: timedelta | None) -> str:
        """A new token for `name` (the token itself, shown once)."""
        if not NAME.fullmatch(name) or name in RESERVED_NAMES:
            raise TokenError(
                "a token name is 1 to 64 lowercase letters, digits, `.`, `_` or `-`, "
                "and not `agent`, `human` or `inference`"
            )
        made = now()
        token, entry = self._made(name, role, scopes, made, made + lifetime if lifetime else None)
        self.storage.add(entry)
        return token

    def revoke(self, name: str) -> int:
        """Revoke every unrevoked token named `name`; how many."""
        return self.storage.revoke(name, now())

    def rotate(self, name: str) -> str:
        """A new token for `name` with the role, scopes and lifetime (from now) of its current one,
        which is revoked in the same step (the new token itself, shown once)."""
        made: list[str] = []

        def successor(old: TeamToken) -> TeamToken:
            at = now()
            expires = None if old.expires_at is None else at + (old.expires_at - old.created_at)
            token, entry = self._made(old.name, old.role, old.scopes, at, expires)
            made.append(token)
            return entry

        self.storage.revoke(name, now(), successor)
        return made[-1]

    def find(self, token: str) -> tuple[TeamToken | None, str]:
        """The entry `token` opens and its state, or (None, "unknown"): also for a token of another
        store (its audience)."""
        parsed = _TOKEN.fullmatch(token)
        if parsed is None:
            return None, "unknown"
        entry = self.storage.with_id(parsed.group(1))
        if entry is None or not hmac.compare_digest(entry.digest, digest(token)) or not self.admits(entry):
            return None, "unknown"
        return entry, entry.state(now())

    def admits(self, entry: TeamToken) -> bool:
        """Whether `entry` was made for this store."""
        return entry.audience is None or entry.audience == self.audience

    def _made(self, name: str, role: Role, scopes: tuple[str, ...], made: datetime,
              expires: datetime | None) -> tuple[str, TeamToken]:  # fmt: skip
        token_id = secrets.token_hex(6)
        token = f"sbt_{token_id}_{secrets.token_urlsafe(32)}"
        return token, TeamToken(name, token_id, digest(token), role, scopes, made, expires, None, self.audience)


class TokenFile:
    """The `TokenStorage` of a directory store: `<store>/team/tokens.toml`."""

    waits = False

    def __init__(self, paths: StorePaths) -> None:
        self.paths = paths
        self.folder = paths.root / TEAM_DIR
        self.file = self.folder / TOKENS_FILE
        self._cached: tuple[tuple[int, int, int], tuple[TeamToken, ...]] | None = None

    def entries(self) -> list[TeamToken]:
        """The entries, parsed again only when the file changed (it is replaced whole, never edited)."""
        try:
            status = os.stat(self.file)
        except FileNotFoundError:
            return []
        signature = (status.st_ino, status.st_mtime_ns, status.st_size)
        if self._cached is not None and self._cached[0] == signature:
            return list(self._cached[1])
        try:
            text = self.file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        try:
            parsed = [_entry(value) for value in tomllib.loads(text).get("token", [])]
        except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError):
            raise TokenError(f"the team token file {TEAM_DIR}/{TOKENS_FILE} is damaged") from None
        self._cached = (signature, tuple(parsed))
        return parsed

    def with_id(self, token_id: str) -> TeamToken | None:
        return next((entry for entry in self.entries() if entry.id == token_id), None)

    def add(self, entry: TeamToken) -> None:
        with self._changing() as entries:
            if any(other.name == entry.name and other.revoked_at is None for other in entries):
                raise TokenError(f"a token named {entry.name} exists; revoke it first")
            entries.append(entry)

    def revoke(self, name: str, at: datetime, successor: Callable[[TeamToken], TeamToken] | None = None) -> int:
        with self._changing() as entries:
            found = [index for index, entry in enumerate(entries) if entry.name == name and entry.revoked_at is None]
            if not found:
                raise TokenError(f"no unrevoked token is named {name}")
            for index in found:
                entries[index] = replace(entries[index], revoked_at=at)
            if successor is not None:
                entries.append(successor(entries[found[-1]]))
        return len(found)

    @contextmanager
    def _changing(self) -> Iterator[list[TeamToken]]:
        """The entries, to change in place and write back whole, under the store's mutation lock."""
        self.folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.folder, 0o700)
        with exclusive_lock(self.paths.mutation_lock, wait=LOCK_WAIT_S):
            entries = self.entries()
            yield entries
            write_atomic(self.file, _render_file(entries).encode("utf-8"))
            os.chmod(self.file, 0o600)


def _entry(value: dict[str, object]) -> TeamToken:
    scopes = value["scopes"]
    assert isinstance(scopes, list)
    return TeamToken(
        name=str(value["name"]), id=str(value["id"]), digest=str(value["sha256"]),
        role=Role[str(value["role"]).upper()], scopes=tuple(str(scope) for scope in scopes),
        created_at=_parse(value["created_at"]), expires_at=_parse_optional(value.get("expires_at")),
        revoked_at=_parse_optional(value.get("revoked_at")),
        audience=str(value["audience"]) if "audience" in value else None,
    )  # fmt: skip


def _parse(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise ValueError("not a time")
    return value


def _parse_optional(value: object) -> datetime | None:
    return None if value is None else _parse(value)


def render_time(value: datetime | None) -> str | None:
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _render_file(entries: list[TeamToken]) -> str:
    blocks = ["# Team tokens of this store: hashes only (`sbuf team token`). Do not edit by hand.\n"]
    for entry in entries:
        lines = [
            "[[token]]",
            f"name = {toml_string(entry.name)}",
            f"id = {toml_string(entry.id)}",
            f"sha256 = {toml_string(entry.digest)}",
            f"role = {toml_string(entry.role.name.lower())}",
            "scopes = [" + ", ".join(toml_string(scope) for scope in entry.scopes) + "]",
            f"created_at = {render_time(entry.created_at)}",
        ]
        lines += [f"audience = {toml_string(entry.audience)}"] if entry.audience else []
        lines += [f"expires_at = {render_time(entry.expires_at)}"] if entry.expires_at else []
        lines += [f"revoked_at = {render_time(entry.revoked_at)}"] if entry.revoked_at else []
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)

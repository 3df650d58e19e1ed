"""Principals, roles and the one authorization check of every door."""

from __future__ import annotations

import getpass
from collections.abc import Collection
from dataclasses import dataclass
from enum import IntEnum
from typing import Literal


class Role(IntEnum):
    """What a principal may do; each role includes every one before it."""

    READER = 1  # recall, get, resources, search
    AGENT = 2  # + remember, update, propose (as candidates)
    REVIEWER = 3  # + approve, reject, add, edit, archive, restore
    ADMIN = 4  # + tokens, import, export, destroy


# operation -> the least role allowed to run it
OPERATIONS: dict[str, Role] = {
    **dict.fromkeys(("recall", "get", "resources", "search"), Role.READER),
    **dict.fromkeys(("remember", "update", "propose"), Role.AGENT),
    **dict.fromkeys(("approve", "reject", "add", "edit", "archive", "restore"), Role.REVIEWER),
    **dict.fromkeys(("tokens", "import", "export", "destroy"), Role.ADMIN),
}

# operation of the version-1 protocol (`sbuf invoke`, MCP, `/v1/invoke/…`) -> the operation `authorize`
# is asked; writes that make a record active at once are edits
PROTOCOL_OPERATIONS = {
    "search": "search", "context": "recall", "get": "get",
    "remember": "remember", "update": "update", "propose": "propose",
    "supersede": "edit", "archive": "archive",
}  # fmt: skip

Kind = Literal["person", "program"]
ALL_SCOPES: frozenset[str] | None = None  # `Principal.scopes` for a principal over every scope


@dataclass(frozen=True)
class Principal:
    """A caller as its credential identifies it.

    `kind` is "person" for someone at the terminal or signed in on the review page, "program" for
    anything presenting a token; a program's writes pass the secret guard, whatever its role.
    """

    name: str
    role: Role
    scopes: frozenset[str] | None  # ALL_SCOPES (None) or the record scopes it may touch
    kind: Kind

    @property
    def person(self) -> bool:
        return self.kind == "person"


class Refused(Exception):
    """`authorize` said no; the message names the operation and the role it needs, nothing else.

    `out_of_scope` is true when the records are outside the principal's scopes: a door then answers
    as it does for a record that does not exist, so that the caller learns nothing about them.
    """

    def __init__(self, message: str, *, out_of_scope: bool = False) -> None:
        super().__init__(message)
        self.out_of_scope = out_of_scope


def authorize(principal: Principal, operation: str, scope: str, proposers: Collection[str] = ()) -> None:
    """Allow `principal` to run `operation` on records of `scope`, or raise Refused.

    `operation` is a key of `OPERATIONS` (a KeyError otherwise: a door names what it runs). For
    `approve`, `proposers` are the authenticated names that wrote the candidate (its sources'
    actors): nobody approves a candidate they proposed, whatever their role (four eyes).
    """
    if principal.scopes is not None and scope not in principal.scopes:
        raise Refused(f"`{operation}` is outside this credential's scopes", out_of_scope=True)
    needed = OPERATIONS[operation]
    if principal.role < needed:
        raise Refused(f"`{operation}` needs the {needed.name.lower()} role")
    if operation == "approve" and principal.name in proposers:
        raise Refused("nobody approves a candidate they proposed; another reviewer must approve it")


def reads_human_records(principal: Principal) -> bool:
    """Whether `principal` may read records whose `access` is `human` (meant for people): those who
    review may (the local user, a team's reviewers and admins); readers and agents may not."""
    return principal.role >= Role.REVIEWER


def local_user(kind: Kind) -> Principal:
    """The one principal of a loopback server: the user running it, admin over every scope."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER
        name = "local"
    return Principal(name, Role.ADMIN, ALL_SCOPES, kind)

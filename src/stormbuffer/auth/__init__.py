"""Who may do what through a door: principals, their roles, and the local credential.

- `Principal(name, role, scopes, kind)`: a caller as a door has authenticated it. `role` orders
  what it may do (`Role.READER` < `AGENT` < `REVIEWER` < `ADMIN`); `scopes` is `ALL_SCOPES` or the
  record scopes it may touch; `kind` says whether a person or a program holds the credential, and
  only a person's writes skip the secret guard. A door never decides that: the credential does.
- `authorize(principal, operation, scope, proposers)`: the one check every door makes before any
  work, four eyes on approvals included; `Refused` says why not (`out_of_scope`: answer as for a
  record that does not exist). `OPERATIONS` names each operation's least role; `PROTOCOL_OPERATIONS`
  maps the version-1 protocol's operations onto them.
- `reads_human_records(principal)`: whether `access = "human"` records are served to it.
- `local_user(kind)`: the one principal of a loopback server, the user who runs it (admin over
  every scope).
- `credential`: the per-user secret of the local doors (`sbuf auth token`), in a 0600 file under
  the user's configuration directory.
- `tokens`: the team server's principals, named tokens kept as hashes with the store
  (`sbuf team token`).

Nothing here imports a door.
"""

from .principals import (
    ALL_SCOPES,
    OPERATIONS,
    PROTOCOL_OPERATIONS,
    Kind,
    Principal,
    Refused,
    Role,
    authorize,
    local_user,
    reads_human_records,
)

__all__ = [
    "ALL_SCOPES", "OPERATIONS", "PROTOCOL_OPERATIONS", "Kind", "Principal", "Refused", "Role", "authorize",
    "local_user", "reads_human_records",
]  # fmt: skip

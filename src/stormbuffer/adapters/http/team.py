"""What a team server is told beyond its tokens (`sbuf serve --team` options): each token's rate
limit, the host names it answers to besides its address, the address its clients know it by, and
how long its audit trail keeps entries, and how many worker processes serve it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from .ratelimit import DEFAULT_RATE, Rate

HOST_NAME = re.compile(r"(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")
BAD_HOST = "must be a DNS name such as memory.example.com (no scheme, no port)"
BAD_URL = "must be http(s)://HOST[:PORT], such as https://memory.example.com (no path)"


@dataclass(frozen=True)
class TeamSettings:
    """`rate`: each token's allowance (`ratelimit`), None for no limit. `hosts`: names admitted in
    `Host` besides the bound address and `localhost`. `public_url`: the server as its clients name
    it (`scheme://host[:port]`), its resource in the RFC 9728 metadata and challenges; its host is
    admitted too. `audit_retention`: how long audit entries are kept, None for ever. `workers`: how
    many processes serve it (more than one share sessions and rate-limit windows through files)."""

    rate: Rate | None = DEFAULT_RATE
    hosts: tuple[str, ...] = ()
    public_url: str | None = None
    audit_retention: timedelta | None = None
    workers: int = 1

    def allowed_hosts(self) -> tuple[str, ...]:
        public = urlsplit(self.public_url).hostname if self.public_url else None
        if public and ":" in public:
            public = f"[{public}]"
        return (*self.hosts, *([public] if public else []))


def host_name(text: str) -> str:
    """`text` as an admitted host name, lowercase; ValueError for anything else."""
    name = text.strip().lower().rstrip(".")
    if HOST_NAME.fullmatch(name) is None:
        raise ValueError(BAD_HOST)
    return name


def public_url(text: str) -> str:
    """`text` as `scheme://host[:port]`, lowercase; ValueError for anything else."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        raise ValueError(BAD_URL) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        raise ValueError(BAD_URL)
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(BAD_URL)
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if ":" not in parts.hostname:
        host_name(host)  # a DNS name or an IPv4 literal
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")

"""What a team server is told beyond its tokens (`sbuf serve --team` options): the rate limit of
each token."""

from __future__ import annotations

from dataclasses import dataclass

from .ratelimit import DEFAULT_RATE, Rate


@dataclass(frozen=True)
class TeamSettings:
    """`rate`: each token's allowance (`ratelimit`), None for no limit."""

    rate: Rate | None = DEFAULT_RATE

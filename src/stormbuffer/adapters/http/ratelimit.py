"""Per-token rate limits of a team server: 429 `rate_limited` with `Retry-After` once a token has
sent its allowance within the last window.

`RateLimit` (ASGI middleware, just inside the credential check) counts every authenticated request
under `/v1/` and to `/mcp` against its principal's name (one unrevoked token per name), in a moving
window (the `limits` library, kept in memory by this process). A request over the limit is answered
before any route reads its body or the store; the audit trail records it (status 429). Requests
without a valid token are refused earlier (401) and counted nowhere.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Receive, Scope, Send

from .audit import MCP_PATH
from .errors import error_response

if TYPE_CHECKING:
    from limits import RateLimitItem

UNITS = {"s": "second", "sec": "second", "second": "second", "min": "minute", "minute": "minute",
         "h": "hour", "hour": "hour"}  # fmt: skip
RATE = re.compile(r"([1-9][0-9]{0,8})/(" + "|".join(UNITS) + r")")
LIMITED = "this token sent too many requests; retry after the time Retry-After names"


@dataclass(frozen=True)
class Rate:
    """At most `count` requests per `unit` (`second`, `minute` or `hour`) for each token."""

    count: int
    unit: str

    @classmethod
    def parse(cls, text: str) -> Rate | None:
        """`600/min`, `10/s`, `5000/hour`…; `off` for no limit. ValueError for anything else."""
        if text.strip().lower() == "off":
            return None
        found = RATE.fullmatch(text.strip().lower())
        if found is None:
            raise ValueError("must be N/s, N/min or N/hour (N from 1), or off")
        return cls(int(found.group(1)), UNITS[found.group(2)])

    def __str__(self) -> str:
        return f"{self.count}/{self.unit}"

    def item(self) -> RateLimitItem:
        from limits import parse

        return parse(f"{self.count}/{self.unit}")


DEFAULT_RATE = Rate(600, "minute")


class RateLimit:
    """ASGI middleware holding each token to `rate`."""

    def __init__(self, app: ASGIApp, rate: Rate) -> None:
        from limits.storage import MemoryStorage
        from limits.strategies import MovingWindowRateLimiter

        self.app = app
        self.item = rate.item()
        self.limiter = MovingWindowRateLimiter(MemoryStorage())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller = scope.get("state", {}).get("principal") if scope["type"] == "http" else None
        path = scope.get("path", "")
        if caller is None or not (path.startswith("/v1/") or path == MCP_PATH):
            await self.app(scope, receive, send)
            return
        if self.limiter.hit(self.item, caller.name):
            await self.app(scope, receive, send)
            return
        await error_response(429, "rate_limited", LIMITED, {"Retry-After": str(self.retry_after(caller.name))})(
            scope, receive, send
        )

    def retry_after(self, name: str) -> int:
        """Whole seconds until `name` may send a request again (at least 1)."""
        reset = self.limiter.get_window_stats(self.item, name).reset_time
        return max(1, math.ceil(reset - time.time()))

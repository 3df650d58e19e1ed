"""Per-token rate limits of a team server: 429 `rate_limited` with `Retry-After` once a token has
sent its allowance within the last window.

`RateLimit` (ASGI middleware, just inside the credential check) counts every authenticated request
under `/v1/` and to `/mcp` against its principal's name (one unrevoked token per name), in a moving
window kept in this process's memory (`MovingWindow`) or, when several worker processes serve the
store, in a file they share (`SharedWindow`): a token gets the same allowance however many serve it.
A request over the limit is answered before
any route reads its body or the store; the audit trail records it (status 429). Requests without a
valid token are refused earlier (401) and counted nowhere.
"""

from __future__ import annotations

import math
import re
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from ...auth.shared import WINDOWS_FILE, SharedDatabase, shared_file
from .audit import MCP_PATH
from .errors import error_response

SECONDS = {"second": 1.0, "minute": 60.0, "hour": 3600.0}
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

    @property
    def window_s(self) -> float:
        return SECONDS[self.unit]


DEFAULT_RATE = Rate(600, "minute")


class MovingWindow:
    """The times of each name's requests within the last `rate.window_s` seconds, at most
    `rate.count` of them: a request is admitted while fewer were admitted in the window before it.

    Old times are dropped when the name is next counted, and names idle for a whole window are
    forgotten at most once a window, so nothing runs between requests and memory stays bounded by
    the names active in the last two windows. Used from the event loop only."""

    def __init__(self, rate: Rate) -> None:
        self.rate = rate
        self._times: dict[str, deque[float]] = {}
        self._swept = time.monotonic()

    def hit(self, name: str) -> bool:
        """Count one request of `name` now, unless its allowance is spent (False then)."""
        now = time.monotonic()
        if now - self._swept >= self.rate.window_s:
            self._sweep(now)
        times = self._times.setdefault(name, deque())
        while times and times[0] <= now - self.rate.window_s:
            times.popleft()
        if len(times) >= self.rate.count:
            return False
        times.append(now)
        return True

    def retry_after(self, name: str) -> int:
        """Whole seconds until `name` may send a request again (at least 1)."""
        times = self._times.get(name)
        if not times:
            return 1
        return max(1, math.ceil(times[0] + self.rate.window_s - time.monotonic()))

    def _sweep(self, now: float) -> None:
        self._swept = now
        idle = [name for name, times in self._times.items() if not times or times[-1] <= now - self.rate.window_s]
        for name in idle:
            del self._times[name]


class SharedWindow:
    """`MovingWindow` kept in a SQLite file under `<store>/team/` (`auth.shared`), so that the worker
    processes of one server count each name's requests together. Times are on the monotonic clock,
    which every process of a host shares; the file is emptied when the server starts."""

    SCHEMA = """CREATE TABLE IF NOT EXISTS hits (name TEXT NOT NULL, at REAL NOT NULL);
                CREATE INDEX IF NOT EXISTS hits_name_at ON hits (name, at);"""

    def __init__(self, rate: Rate, root: Path) -> None:
        self.rate = rate
        self.database = SharedDatabase(shared_file(root, WINDOWS_FILE), self.SCHEMA)
        self._swept = time.monotonic()

    def hit(self, name: str) -> bool:
        """Count one request of `name` now, unless its allowance is spent (False then)."""
        now = time.monotonic()
        start = now - self.rate.window_s
        with self.database.transaction() as db:
            if now - self._swept >= self.rate.window_s:
                self._swept = now
                db.execute("DELETE FROM hits WHERE at <= ?", (start,))
            db.execute("DELETE FROM hits WHERE name = ? AND at <= ?", (name, start))
            (count,) = db.execute("SELECT count(*) FROM hits WHERE name = ?", (name,)).fetchone()
            if count >= self.rate.count:
                return False
            db.execute("INSERT INTO hits VALUES (?, ?)", (name, now))
        return True

    def retry_after(self, name: str) -> int:
        """Whole seconds until `name` may send a request again (at least 1)."""
        with self.database.transaction() as db:
            (first,) = db.execute("SELECT min(at) FROM hits WHERE name = ?", (name,)).fetchone()
        return 1 if first is None else max(1, math.ceil(first + self.rate.window_s - time.monotonic()))


class RateLimit:
    """ASGI middleware holding each token to `rate`, counted in this process or, with `shared` (the
    store's root), across the worker processes serving that store."""

    def __init__(self, app: ASGIApp, rate: Rate, shared: Path | None = None) -> None:
        self.app = app
        self.window: MovingWindow | SharedWindow = MovingWindow(rate) if shared is None else SharedWindow(rate, shared)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller = scope.get("state", {}).get("principal") if scope["type"] == "http" else None
        path = scope.get("path", "")
        if caller is None or not (path.startswith("/v1/") or path == MCP_PATH):
            await self.app(scope, receive, send)
            return
        if self.window.hit(caller.name):
            await self.app(scope, receive, send)
            return
        retry = {"Retry-After": str(self.window.retry_after(caller.name))}
        await error_response(429, "rate_limited", LIMITED, retry)(scope, receive, send)

"""RFC 3339 timestamps that keep their offset and nanosecond precision.

`datetime.fromisoformat` is too lenient and stops at microseconds, so timestamps are parsed with a
strict pattern and kept as (civil time, nanoseconds, offset). Rendering matches the canonical
format: `Z` for a zero offset, fractional seconds only when non-zero with trailing zeros trimmed.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_PATTERN = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)


@dataclass(frozen=True, order=False)
class Timestamp:
    """An instant with the offset it was written in. Equality and order compare instants."""

    civil: datetime  # naive, whole seconds, in the written offset
    nanos: int
    offset_minutes: int

    @classmethod
    def parse(cls, text: str) -> Timestamp:
        match = _PATTERN.fullmatch(text)
        if match is None:
            raise ValueError("must be an RFC 3339 timestamp")
        year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
        fraction, _zulu, sign, off_h, off_m = match.groups()[6:]
        try:
            civil = datetime(year, month, day, hour, minute, second)
        except ValueError as exc:
            raise ValueError(f"must be an RFC 3339 timestamp: {exc}") from None
        offset = 0
        if sign is not None:
            if int(off_h) > 23 or int(off_m) > 59:
                raise ValueError("must be an RFC 3339 timestamp: offset out of range")
            offset = (int(off_h) * 60 + int(off_m)) * (-1 if sign == "-" else 1)
        nanos = int(fraction.ljust(9, "0")) if fraction else 0
        return cls(civil, nanos, offset)

    @classmethod
    def now(cls) -> Timestamp:
        total = time.time_ns()
        seconds, nanos = divmod(total, 1_000_000_000)
        civil = datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)
        return cls(civil, nanos, 0)

    def render(self) -> str:
        text = self.civil.strftime("%Y-%m-%dT%H:%M:%S")
        if self.nanos:
            text += "." + f"{self.nanos:09d}".rstrip("0")
        if self.offset_minutes == 0:
            return text + "Z"
        sign = "-" if self.offset_minutes < 0 else "+"
        hours, minutes = divmod(abs(self.offset_minutes), 60)
        return f"{text}{sign}{hours:02d}:{minutes:02d}"

    def instant_ns(self) -> int:
        """Nanoseconds since the Unix epoch (UTC)."""
        utc = self.civil - timedelta(minutes=self.offset_minutes)
        seconds = int((utc - datetime(1970, 1, 1)).total_seconds())
        return seconds * 1_000_000_000 + self.nanos

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Timestamp) and self.instant_ns() == other.instant_ns()

    def __lt__(self, other: Timestamp) -> bool:
        return self.instant_ns() < other.instant_ns()

    def __le__(self, other: Timestamp) -> bool:
        return self.instant_ns() <= other.instant_ns()

    def __hash__(self) -> int:
        return hash(self.instant_ns())

    def __str__(self) -> str:
        return self.render()


def later_of(a: Timestamp, b: Timestamp) -> Timestamp:
    return b if a < b else a

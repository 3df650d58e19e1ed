"""Time references in a query, and how near a record is to one.

`parse` finds the first English expression of a time in a query, relative to the moment the
question is asked (`now`, UTC):

- a window: "yesterday", "today", "last week", "this month", "last year", "last Monday",
  "last weekend", "3 days ago", "a couple of weeks ago", "the past 2 months", "in March",
  "May 14", "14 May 2023", "in 2023", "2023-05-14"; "since/after X" opens it towards now,
  "before/until X" towards the past. A month or day without a year is its latest occurrence
  not after `now`; a bare month name counts only with a preposition or a day or year beside it
  ("may" and "march" are also verbs);
- an order, when no window is named: "latest", "most recent", "recently", "currently", "last
  time", "nowadays" prefer newer records; "earliest", "first time", "originally", "initially",
  "at first" prefer older ones.

A query naming no time gets None, and ranking is exactly what it is without this module.

A record's moment is the latest `observed_at` of its sources, else its `created_at`: when the
fact was seen, not when the file was last edited. `closeness` gives each candidate a value in
[0, 1]: for a window, 1 inside it and `exp(-gap / width)` outside (width: the window's length,
at least a day; 30 days for an open window), and 0 below `MIN_CLOSENESS`; for an order, the
candidate's position between the
oldest and newest candidate (all equal: 0 for every one).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .hits import SearchHit

TIME_WEIGHT = 0.1  # the most a time reference adds to a fused score (whose parts lie in [0, 1])
MIN_CLOSENESS = 0.01  # a record farther from a window than this counts as not near it at all
DAY = timedelta(days=1)
_OPEN_WIDTH = timedelta(days=30)
_UNITS = {"day": DAY, "week": 7 * DAY, "fortnight": 14 * DAY, "month": 30 * DAY, "year": 365 * DAY}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a few": 3,
            "couple of": 2, "few": 3, "several": 3}  # fmt: skip
_MONTHS = {name: number for number, names in enumerate(
    ("january jan", "february feb", "march mar", "april apr", "may", "june jun", "july jul", "august aug",
     "september sep sept", "october oct", "november nov", "december dec"), 1) for name in names.split()}  # fmt: skip
_WEEKDAYS = {name: number for number, name in enumerate(
    ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))}  # fmt: skip

_NUMBER = r"(\d{1,3}|" + "|".join(sorted((re.escape(n) for n in _NUMBERS), key=len, reverse=True)) + ")"
_UNIT = r"(day|week|fortnight|month|year)s?"
_MONTH = r"(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"
_BOUND = r"(?:(since|after|from|before|until|till|by)\s+)?"
_AGO = re.compile(rf"\b{_NUMBER}\s+{_UNIT}\s+(?:ago|back|earlier)\b")
_PAST = re.compile(rf"\b(?:the\s+)?(?:last|past|previous)\s+{_NUMBER}\s+{_UNIT}\b")
_RELATIVE_DAY = re.compile(r"\b(the day before yesterday|yesterday|today|tonight|this morning|this evening)\b")
_CALENDAR = re.compile(r"\b(last|this|previous|past)\s+(week|weekend|month|year)\b")
_LAST_WEEKDAY = re.compile(r"\b(?:last|this past|on)\s+(" + "|".join(_WEEKDAYS) + r")\b")
_ISO = re.compile(rf"\b{_BOUND}{_YEAR}[-/](\d{{1,2}})[-/](\d{{1,2}})\b")
_MONTH_DAY = re.compile(rf"\b{_BOUND}(?:(?:on|in|of|during|early|late|mid|last|this)\s+)?"
                        rf"(?:{_MONTH}\s+{_DAY}(?:,?\s+{_YEAR})?"
                        rf"|{_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?)\b")  # fmt: skip
_MONTH_YEAR = re.compile(rf"\b{_BOUND}(?:(in|of|during|early|late|mid|last|this)\s+)?{_MONTH}(?:,?\s+{_YEAR})?\b")
_YEAR_ONLY = re.compile(rf"\b(?:(since|after|from|before|until|till|by)|in|during|of)\s+{_YEAR}\b")
_NEWEST = re.compile(r"\b(latest|most recent(?:ly)?|recently|lately|currently|nowadays|these days|last time|newest)\b")
_OLDEST = re.compile(r"\b(earliest|first time|originally|initially|at first|oldest)\b")


@dataclass(frozen=True)
class TimeReference:
    """A window [start, end) (either end may be open) or an order ("newest" / "oldest")."""

    phrase: str
    start: datetime | None = None
    end: datetime | None = None
    order: str | None = None

    def describe(self) -> str:
        """`window=2023-05-01/2023-06-01` (`..` for an open end), or `order=newest`."""
        if self.order is not None:
            return f"order={self.order}"
        start = self.start.date().isoformat() if self.start else ".."
        end = self.end.date().isoformat() if self.end else ".."
        return f"window={start}/{end}"


def parse(query: str, now: datetime) -> TimeReference | None:
    """The first time reference of the query, or None."""
    text = " ".join(query.lower().split())
    today = datetime(now.year, now.month, now.day, tzinfo=UTC)
    for finder in (_ago, _past, _relative_day, _calendar, _last_weekday, _iso, _month_day, _month_year, _year):
        found = finder(text, now, today)
        if found is not None:
            return found
    if (match := _NEWEST.search(text)) is not None:
        return TimeReference(match.group(0), order="newest")
    if (match := _OLDEST.search(text)) is not None:
        return TimeReference(match.group(0), order="oldest")
    return None


def moment(hit: SearchHit) -> datetime | None:
    """When the record's fact was seen: its sources' latest `observed_at`, else its `created_at`."""
    observed = [source["observed_at"] for source in json.loads(hit.sources_json) if "observed_at" in source]
    return _instant(max(observed, key=_instant_key) if observed else hit.created_at)


def closeness(reference: TimeReference, hits: dict[str, SearchHit]) -> dict[str, float]:
    """Record id → how near its moment is to the reference, in [0, 1] (records without one: 0)."""
    moments = {record_id: when for record_id, hit in hits.items() if (when := moment(hit)) is not None}
    if reference.order is not None:
        if not moments:
            return {}
        oldest, newest = min(moments.values()), max(moments.values())
        span = (newest - oldest).total_seconds()
        if span <= 0:
            return dict.fromkeys(moments, 0.0)
        share = {key: (when - oldest).total_seconds() / span for key, when in moments.items()}
        return share if reference.order == "newest" else {key: 1.0 - value for key, value in share.items()}
    width = (reference.end - reference.start) if reference.start and reference.end else _OPEN_WIDTH
    scale = max(width, DAY).total_seconds()
    near = {}
    for key, when in moments.items():
        if reference.start is not None and when < reference.start:
            gap = (reference.start - when).total_seconds()
        elif reference.end is not None and when >= reference.end:
            gap = (when - reference.end).total_seconds()
        else:
            gap = 0.0
        value = math.exp(-gap / scale)
        near[key] = value if value >= MIN_CLOSENESS else 0.0
    return near


# ---- finders: (lowercased query, now, start of today) -> reference or None ---------------------


def _window(phrase: str, start: datetime, end: datetime, bound: str | None = None) -> TimeReference:
    """A window, opened towards now after "since"/"after"/"from", towards the past after "before"/"until"."""
    if bound in ("since", "after", "from"):
        return TimeReference(phrase, start=end if bound == "after" else start)
    if bound in ("before", "until", "till", "by"):
        return TimeReference(phrase, end=start if bound == "before" else end)
    return TimeReference(phrase, start=start, end=end)


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word]


def _ago(text: str, now: datetime, today: datetime) -> TimeReference | None:
    match = _AGO.search(text)
    if match is None:
        return None
    unit = _UNITS[match.group(2)]
    center = now - _count(match.group(1)) * unit
    half = max(unit / 2, DAY / 2)
    return _window(match.group(0), center - half, center + half)


def _past(text: str, now: datetime, today: datetime) -> TimeReference | None:
    match = _PAST.search(text)
    if match is None:
        return None
    return _window(match.group(0), now - _count(match.group(1)) * _UNITS[match.group(2)], now)


def _relative_day(text: str, now: datetime, today: datetime) -> TimeReference | None:
    match = _RELATIVE_DAY.search(text)
    if match is None:
        return None
    back = {"the day before yesterday": 2, "yesterday": 1}.get(match.group(1), 0)
    return _window(match.group(0), today - back * DAY, today - (back - 1) * DAY)


def _calendar(text: str, now: datetime, today: datetime) -> TimeReference | None:
    match = _CALENDAR.search(text)
    if match is None:
        return None
    which, unit = match.groups()
    back = 0 if which == "this" else 1
    if unit in ("week", "weekend"):
        monday = today - today.weekday() * DAY - back * 7 * DAY
        if unit == "weekend":
            saturday = monday + 5 * DAY
            if saturday + 2 * DAY > now:  # the weekend not yet over is "this", not "last"
                saturday -= 7 * DAY
            return _window(match.group(0), saturday, saturday + 2 * DAY)
        return _window(match.group(0), monday, monday + 7 * DAY)
    if unit == "month":
        year, month = (today.year, today.month - back) if today.month > back else (today.year - 1, 12)
        return _window(match.group(0), *_month_span(year, month))
    return _window(match.group(0), datetime(today.year - back, 1, 1, tzinfo=UTC),
                   datetime(today.year - back + 1, 1, 1, tzinfo=UTC))  # fmt: skip


def _last_weekday(text: str, now: datetime, today: datetime) -> TimeReference | None:
    match = _LAST_WEEKDAY.search(text)
    if match is None:
        return None
    back = (today.weekday() - _WEEKDAYS[match.group(1)] - 1) % 7 + 1  # 1..7 days before today
    return _window(match.group(0), today - back * DAY, today - (back - 1) * DAY)


def _iso(text: str, now: datetime, today: datetime) -> TimeReference | None:
    for match in _ISO.finditer(text):
        bound, year, month, day = match.groups()
        start = _date(int(year), int(month), int(day))
        if start is not None:
            return _window(match.group(0), start, start + DAY, bound)
    return None


def _month_day(text: str, now: datetime, today: datetime) -> TimeReference | None:
    for match in _MONTH_DAY.finditer(text):
        bound, month_a, day_a, year_a, day_b, month_b, year_b = match.groups()
        month, day, year = _MONTHS[month_a or month_b], int(day_a or day_b), year_a or year_b
        start = _date(int(year) if year else today.year, month, day)
        if start is not None and year is None and start > today:
            start = _date(today.year - 1, month, day)
        if start is not None:
            return _window(match.group(0), start, start + DAY, bound)
    return None


def _month_year(text: str, now: datetime, today: datetime) -> TimeReference | None:
    for match in _MONTH_YEAR.finditer(text):
        bound, preposition, name, year = match.groups()
        if bound is None and preposition is None and year is None:
            continue  # a bare "may" or "march" is more often a verb
        month = _MONTHS[name]
        start_year = int(year) if year else (today.year if month <= today.month else today.year - 1)
        return _window(match.group(0), *_month_span(start_year, month), bound)
    return None


def _year(text: str, now: datetime, today: datetime) -> TimeReference | None:
    match = _YEAR_ONLY.search(text)
    if match is None:
        return None
    year = int(match.group(2))
    start, end = datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    return _window(match.group(0), start, end, match.group(1))


def _month_span(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=UTC)
    return start, datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)


def _date(year: int, month: int, day: int) -> datetime | None:
    try:
        return datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None


def _instant(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _instant_key(text: str) -> datetime:
    return _instant(text) or datetime.min.replace(tzinfo=UTC)

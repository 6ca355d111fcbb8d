"""The one cron parser and evaluator (README: Heartbeat, Cron): ``minute hour day-of-month month day-of-week``.

``next_after`` is the first minute strictly after an instant, in ``tz``: a local time a DST change skips does not
run, a repeated one runs once (its first pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from functools import lru_cache

from automaton_min.errors import UserError


class CronError(UserError, ValueError):
    """An expression this evaluator cannot read; the message names the field."""


FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
MONTH_NAMES = {n: i for i, n in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), start=1)}
DAY_NAMES = {n: i for i, n in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
MAX_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
SEARCH_YEARS = 30  # Feb 29 on a given weekday can be 28 years away; beyond that nothing will come


@dataclass(frozen=True)
class CronSpec:
    """A parsed expression: the allowed values of each field (weekdays 0-6, Sunday 0)."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    day_or: bool  # both day fields restricted: either may match

    def day_matches(self, day: datetime) -> bool:
        in_month = day.day in self.days
        in_week = (day.isoweekday() % 7) in self.weekdays
        return (in_month or in_week) if self.day_or else (in_month and in_week)


def _value(text: str, index: int) -> int:
    names = MONTH_NAMES if index == 3 else DAY_NAMES if index == 4 else {}
    upper = text.upper()
    if upper in names:
        return names[upper]
    if not (text.isascii() and text.isdigit()):
        raise CronError(f"{FIELDS[index]} field: {text!r} is not a number")
    value = int(text)
    low, high = BOUNDS[index]
    if not low <= value <= high:
        raise CronError(f"{FIELDS[index]} field: {value} is outside {low}-{high}")
    return value


def _field(text: str, index: int) -> frozenset[int]:
    low, high = BOUNDS[index]
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"{FIELDS[index]} field {text!r}: an empty list item")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit()) or int(step_text) == 0:
                raise CronError(f"{FIELDS[index]} field {text!r}: the step must be a whole number above 0")
            step = int(step_text)
        if base == "*":
            start, end = low, high if index != 4 else 6
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = _value(first, index), _value(last, index)
            if start > end:
                raise CronError(f"{FIELDS[index]} field {text!r}: the range {base} runs backwards")
        else:
            start = _value(base, index)
            end = (high if index != 4 else 6) if slash else start
        values.update(range(start, end + 1, step))
    if index == 4 and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values)


def parse(expr: object) -> CronSpec:
    """Parse ``expr`` or raise ``CronError`` naming the field that is wrong."""
    if not isinstance(expr, str):
        raise CronError("a cron expression must be text")
    return _parse(expr)


@lru_cache(maxsize=256)
def _parse(expr: str) -> CronSpec:
    parts = expr.split()
    if len(parts) != 5:
        raise CronError(f"a cron expression has 5 fields (minute hour day-of-month month day-of-week), "
                        f"not {len(parts)}: {expr!r}")
    minutes, hours, days, months, weekdays = (_field(part, i) for i, part in enumerate(parts))
    dom_any, dow_any = ("*" in parts[i].split(",") for i in (2, 4))
    spec = CronSpec(minutes, hours, days, months, weekdays, day_or=not dom_any and not dow_any)
    if not spec.day_or and dow_any and not any(d <= MAX_DAYS_IN_MONTH[m - 1] for m in months for d in days):
        raise CronError(f"day-of-month field {parts[2]!r}: no such day in month(s) {parts[3]!r}")
    return spec


def validate(expr: object) -> str | None:
    """Why ``expr`` is not a valid expression, or None."""
    try:
        parse(expr)
    except CronError as exc:
        return str(exc)
    return None


def _local_to_ms(wall: datetime, tz: tzinfo) -> int | None:
    """Epoch ms of a naive wall time in ``tz`` (first pass when repeated), None when the zone skips it."""
    aware = wall.replace(tzinfo=tz, fold=0)
    utc = aware.astimezone(timezone.utc)
    if utc.astimezone(tz).replace(tzinfo=None) != wall:  # inside a DST gap
        return None
    return int(utc.timestamp()) * 1000


def next_after(expr: str | CronSpec, instant_ms: int, tz: tzinfo = timezone.utc) -> int:
    """The first minute matching ``expr`` strictly after ``instant_ms`` (epoch ms), in epoch ms."""
    spec = parse(expr) if isinstance(expr, str) else expr
    local = datetime.fromtimestamp(instant_ms // 1000, tz=timezone.utc).astimezone(tz).replace(tzinfo=None)
    t = local.replace(second=0, microsecond=0) + timedelta(minutes=1)
    limit = t + timedelta(days=366 * SEARCH_YEARS)
    while t < limit:
        if t.month not in spec.months:
            t = (t.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
            continue
        if not spec.day_matches(t):
            t = t.replace(hour=0, minute=0) + timedelta(days=1)
            continue
        if t.hour not in spec.hours:
            t = t.replace(minute=0) + timedelta(hours=1)
            continue
        later = [m for m in spec.minutes if m >= t.minute]
        if not later:
            t = t.replace(minute=0) + timedelta(hours=1)
            continue
        t = t.replace(minute=min(later))
        ms = _local_to_ms(t, tz)
        if ms is not None and ms > instant_ms:
            return ms
        t += timedelta(minutes=1)
    shown = expr if isinstance(expr, str) else "the expression"
    raise CronError(f"{shown} has no time in the next {SEARCH_YEARS} years")


def timezone_named(name: str | None) -> tzinfo:
    """The zone for ``heartbeatTimezone`` (an IANA name such as ``Europe/Berlin``); UTC when unset."""
    if not name or name.upper() == "UTC":
        return timezone.utc
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise UserError(f"heartbeatTimezone: {name!r} is not a time zone this system knows ({exc})") from None

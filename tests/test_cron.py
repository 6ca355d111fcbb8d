"""The one cron parser (automaton_min/cron.py), checked against croniter (a dev-only oracle) and by hand."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from automaton_min.clock import from_iso, to_iso
from automaton_min.cron import CronError, next_after, parse, timezone_named

croniter = pytest.importorskip("croniter").croniter

RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))


@st.composite
def field(draw, index: int) -> str:
    low, high = RANGES[index]
    items = []
    for _ in range(draw(st.integers(1, 3))):
        shape = draw(st.sampled_from(("star", "step", "value", "range", "range_step", "start_step")))
        a = draw(st.integers(low, high))
        b = draw(st.integers(low, high))
        n = draw(st.integers(1, max(1, high - low)))
        if shape == "star":
            items.append("*")
        elif shape == "step":
            items.append(f"*/{n}")
        elif shape == "value":
            items.append(str(a))
        elif shape == "range" and a < b:
            items.append(f"{a}-{b}")
        elif shape == "range_step" and a < b:
            items.append(f"{a}-{b}/{n}")
        elif shape == "start_step":
            items.append(f"{a}/{n}")
        else:
            items.append(str(b))
    return ",".join(items)


def expanded(text: str, index: int) -> set[int]:
    spec = parse(" ".join(text if i == index else "*" for i in range(5)))
    return set((spec.minutes, spec.hours, spec.days, spec.months, spec.weekdays)[index])


@st.composite
def expression(draw) -> str:
    fields = [draw(field(i)) for i in range(5)]
    # croniter's own conventions where cron has none: a day field that covers every value but is written
    # otherwise, next to a day field containing '*', switches it to AND (vixie's rule); leave those out.
    for index, size in ((2, 31), (4, 7)):
        if fields[index] != "*" and len(expanded(fields[index], index)) == size:
            assume("*" not in fields[6 - index])
    return " ".join(fields)


INSTANTS = st.integers(from_iso("2000-01-01T00:00:00.000Z"), from_iso("2040-12-31T23:59:59.999Z"))


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(expression(), INSTANTS)
def test_next_after_agrees_with_croniter(expr: str, instant_ms: int) -> None:
    try:
        parse(expr)
    except CronError:  # a day that never occurs in the months given: croniter fails too, at search time
        assume(False)
    start = datetime.fromtimestamp(instant_ms / 1000, tz=timezone.utc)
    expected = croniter(expr, start).get_next(datetime)
    assert to_iso(next_after(expr, instant_ms)) == to_iso(int(expected.timestamp() * 1000)), expr


def at(text: str) -> int:
    return from_iso(text)


@pytest.mark.parametrize(("expr", "after", "expected"), [
    ("*/15 * * * *", "2026-11-22T10:15:00.000Z", "2026-11-22T10:30:00.000Z"),  # strictly after
    ("*/15 * * * *", "2026-11-22T10:14:59.999Z", "2026-11-22T10:15:00.000Z"),
    ("0 */6 * * *", "2026-11-22T23:01:00.000Z", "2026-11-23T00:00:00.000Z"),
    ("0 0 1 JAN *", "2026-11-22T00:00:00.000Z", "2027-01-01T00:00:00.000Z"),
    ("0 9 * * MON-FRI", "2026-11-21T12:00:00.000Z", "2026-11-23T09:00:00.000Z"),  # Saturday -> Monday
    ("0 0 13 * 5", "2026-11-01T00:00:00.000Z", "2026-11-06T00:00:00.000Z"),  # the 13th OR a Friday
    ("0 0 * * 7", "2026-11-22T00:00:00.000Z", "2026-11-29T00:00:00.000Z"),  # 7 is Sunday
    ("0 0 29 2 *", "2026-03-01T00:00:00.000Z", "2028-02-29T00:00:00.000Z"),
])
def test_known_answers(expr: str, after: str, expected: str) -> None:
    assert to_iso(next_after(expr, at(after))) == expected


@pytest.mark.parametrize(("expr", "field_name"), [
    ("* * * *", "5 fields"),
    ("60 * * * *", "minute"),
    ("* 24 * * *", "hour"),
    ("* * 0 * *", "day-of-month"),
    ("* * * 13 *", "month"),
    ("* * * * 8", "day-of-week"),
    ("*/0 * * * *", "minute"),
    ("* 5-2 * * *", "hour"),
    ("* * * FOO *", "month"),
    ("0 0 31 2 *", "day-of-month"),
    ("1,,2 * * * *", "minute"),
])
def test_invalid_expressions_name_the_field(expr: str, field_name: str) -> None:
    with pytest.raises(CronError, match=field_name):
        parse(expr)


def test_time_zone_runs_at_local_time_and_skips_a_dst_gap() -> None:
    berlin = timezone_named("Europe/Berlin")
    # 09:00 in Berlin is 08:00 UTC in winter
    assert to_iso(next_after("0 9 * * *", at("2026-11-22T10:00:00.000Z"), berlin)) == "2026-11-23T08:00:00.000Z"
    # 2027-03-28 02:30 does not exist in Berlin: the next run is the day after
    assert to_iso(next_after("30 2 * * *", at("2027-03-27T12:00:00.000Z"), berlin)) == "2027-03-29T00:30:00.000Z"
    # 2026-10-25 02:30 happens twice in Berlin: it runs once, at the first pass (00:30 UTC)
    first = next_after("30 2 * * *", at("2026-10-24T12:00:00.000Z"), berlin)
    assert to_iso(first) == "2026-10-25T00:30:00.000Z"
    assert to_iso(next_after("30 2 * * *", first, berlin)) == "2026-10-26T01:30:00.000Z"


def test_unknown_time_zone_is_a_user_error() -> None:
    with pytest.raises(Exception, match="heartbeatTimezone"):
        timezone_named("Mars/Olympus")

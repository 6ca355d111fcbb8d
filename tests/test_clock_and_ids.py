"""The one timestamp format and ULIDs."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given
from hypothesis import strategies as st

from automaton_min.clock import from_iso, is_stored_format, system_now, to_iso
from automaton_min.ids import new_ulid

# 1970 .. 2999, in epoch milliseconds
EPOCH_MS = st.integers(min_value=0, max_value=32_503_680_000_000)


def test_stored_format_matches_javascript_to_iso_string() -> None:
    assert to_iso(1_795_342_530_250) == "2026-11-22T10:15:30.250Z"
    assert to_iso(0) == "1970-01-01T00:00:00.000Z"


@given(EPOCH_MS)
def test_round_trip_is_exact(ms: int) -> None:
    text = to_iso(ms)
    assert is_stored_format(text)
    assert from_iso(text) == ms


@given(EPOCH_MS, EPOCH_MS)
def test_text_order_is_time_order(a: int, b: int) -> None:
    assert (to_iso(a) < to_iso(b)) == (a < b)


def test_older_formats_parse_to_the_same_instant() -> None:
    expected = from_iso("2026-02-19T14:00:00.000Z")
    assert from_iso("2026-02-19 14:00:00") == expected
    assert from_iso("2026-02-19T14:00:00Z") == expected
    assert from_iso("2026-02-19T15:00:00+01:00") == expected
    assert not is_stored_format("2026-02-19 14:00:00")
    assert not is_stored_format("2026-02-19T14:00:00.000Z\n")


def test_system_now_is_epoch_milliseconds() -> None:
    before = int(datetime.now(timezone.utc).timestamp() * 1000)
    now = system_now()
    assert before - 1000 <= now <= before + 60_000


def test_ulid_shape_and_time_prefix() -> None:
    ulid = new_ulid(1_795_342_530_250)
    assert len(ulid) == 26
    assert set(ulid) <= set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
    assert ulid[:10] == new_ulid(1_795_342_530_250)[:10]


@given(EPOCH_MS, EPOCH_MS)
def test_ulids_sort_by_time(a: int, b: int) -> None:
    if a != b:
        assert (new_ulid(a) < new_ulid(b)) == (a < b)


def test_ulids_are_unique_within_a_millisecond() -> None:
    assert len({new_ulid(1000) for _ in range(1000)}) == 1000


def test_ulids_of_one_millisecond_sort_in_the_order_they_were_made() -> None:
    made = [new_ulid(2000) for _ in range(500)]
    assert made == sorted(made) and len(set(made)) == 500
    assert new_ulid(1999) < made[0] and new_ulid(2001) > made[-1]


def test_ulids_stay_ordered_per_millisecond_when_other_times_come_between() -> None:
    made = []
    for n in range(50):
        made.append(new_ulid(3000))
        new_ulid(5_000_000 + n)  # another clock in the same process
    assert made == sorted(made)

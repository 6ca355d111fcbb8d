"""Agent states (the one transition table, KV writes only on change), the survival assessment and the
financial cache."""

from __future__ import annotations

import itertools

import pytest

from automaton_min.agent.states import (
    AGENT_STATES,
    STATE_KEY,
    TRANSITIONS,
    InvalidTransition,
    can_transition,
    read_agent_state,
    set_agent_state,
)
from automaton_min.agent.survival import (
    TOPUP_MIN_USDC_ATOMIC,
    UNKNOWN_START_TIER,
    FinancialCache,
    FinancialReading,
    SurvivalAssessment,
    assess,
)
from automaton_min.clock import to_iso
from automaton_min.conway.client import CreditsReading
from automaton_min.store.db import Database
from automaton_min.store.kv import get_value, set_value
from automaton_min.tiers import TIERS, tier_for_credits

# --------------------------------------------------------------------------- the transition table

ALLOWED = {
    ("setup", "waking"),
    ("waking", "running"), ("waking", "low_compute"), ("waking", "critical"), ("waking", "dead"), ("waking", "sleeping"),
    ("running", "low_compute"), ("running", "critical"), ("running", "dead"), ("running", "sleeping"),
    ("running", "waking"),
    ("low_compute", "running"), ("low_compute", "critical"), ("low_compute", "dead"), ("low_compute", "sleeping"),
    ("low_compute", "waking"),
    ("critical", "running"), ("critical", "low_compute"), ("critical", "dead"), ("critical", "sleeping"),
    ("critical", "waking"),
    ("sleeping", "waking"), ("sleeping", "dead"),
}


def test_the_table_is_exactly_the_documented_graph() -> None:
    assert set(TRANSITIONS) == set(AGENT_STATES)
    assert {(a, b) for a, targets in TRANSITIONS.items() for b in targets} == ALLOWED | {("dead", "waking")}


@pytest.mark.parametrize("move", sorted(ALLOWED))
def test_every_allowed_move(move: tuple[str, str]) -> None:
    assert can_transition(*move)


@pytest.mark.parametrize("move", [
    ("setup", "running"), ("setup", "dead"), ("setup", "sleeping"),
    ("waking", "setup"), ("running", "setup"),
    ("sleeping", "running"), ("sleeping", "low_compute"), ("sleeping", "critical"),
    ("dead", "running"), ("dead", "sleeping"), ("dead", "low_compute"), ("dead", "critical"), ("dead", "setup"),
    ("running", "nonsense"), ("nonsense", "waking"),
])
def test_forbidden_moves(move: tuple[str, str]) -> None:
    assert not can_transition(*move)
    assert not can_transition(*move, funded=True)


def test_every_pair_outside_the_table_is_refused() -> None:
    for a, b in itertools.product(AGENT_STATES, repeat=2):
        if a != b and (a, b) not in ALLOWED and (a, b) != ("dead", "waking"):
            assert not can_transition(a, b, funded=True), (a, b)


def test_staying_put_is_always_allowed() -> None:
    assert all(can_transition(s, s) for s in AGENT_STATES)


def test_dead_wakes_only_when_funded() -> None:
    assert not can_transition("dead", "waking")
    assert can_transition("dead", "waking", funded=True)


# --------------------------------------------------------------------------- set_agent_state


def kv_row(db: Database) -> tuple | None:
    return db.query_one("SELECT value, updated_at FROM kv WHERE key = ?", (STATE_KEY,))


def test_a_fresh_database_is_in_setup(db: Database) -> None:
    assert read_agent_state(db) == "setup"
    assert kv_row(db) is None


def test_a_path_through_a_life(db: Database, clock) -> None:
    path = ["waking", "running", "low_compute", "critical", "running", "sleeping", "waking", "critical", "dead"]
    for state in path:
        clock.advance(1000)
        assert set_agent_state(db, state, clock(), reason="test") is True
        assert kv_row(db) == (state, to_iso(clock()))
    with pytest.raises(InvalidTransition, match="from dead to waking without funding"):
        set_agent_state(db, "waking", clock(), reason="a new cycle")
    assert set_agent_state(db, "waking", clock(), reason="funded", funded=True) is True
    assert read_agent_state(db) == "waking"


def test_the_state_is_written_only_when_it_changes(db: Database, clock) -> None:
    set_agent_state(db, "waking", clock(), reason="start")
    set_agent_state(db, "running", clock(), reason="awake")
    written = kv_row(db)
    clock.advance(60_000)
    for _ in range(5):
        assert set_agent_state(db, "running", clock(), reason="every turn") is False
    assert kv_row(db) == written  # same updated_at: no write
    changes = db.connection.total_changes()
    set_agent_state(db, "running", clock(), reason="again")
    assert db.connection.total_changes() == changes


def test_a_refused_move_writes_nothing(db: Database, clock) -> None:
    with pytest.raises(InvalidTransition, match="from setup to running"):
        set_agent_state(db, "running", clock(), reason="skip waking")
    with pytest.raises(InvalidTransition):
        set_agent_state(db, "asleep-ish", clock(), reason="typo")
    assert kv_row(db) is None


def test_an_unknown_stored_state_reads_as_setup_and_can_wake(db: Database, clock) -> None:
    set_value(db, STATE_KEY, "normal", clock())  # a value the reference's CLI knew, not a state
    assert read_agent_state(db) == "setup"
    assert set_agent_state(db, "waking", clock(), reason="start") is True
    assert get_value(db, STATE_KEY) == "waking"


def test_the_check_and_write_join_the_callers_transaction(db: Database, clock) -> None:
    set_agent_state(db, "waking", clock(), reason="start")
    with pytest.raises(RuntimeError):
        with db.transaction():
            set_agent_state(db, "running", clock(), reason="inside a turn")
            raise RuntimeError("the turn failed")
    assert read_agent_state(db) == "waking"


# --------------------------------------------------------------------------- the survival assessment


def fresh(cents: int | None, usdc: int | None = None) -> FinancialReading:
    return FinancialReading(cents, True, usdc)


def stale(cents: int | None, usdc: int | None = None) -> FinancialReading:
    return FinancialReading(cents, False, usdc)


@pytest.mark.parametrize("cents, tier, state, low", [
    (100_000, "high", "running", False),
    (501, "high", "running", False),
    (500, "normal", "running", False),
    (51, "normal", "running", False),
    (50, "low_compute", "low_compute", True),
    (11, "low_compute", "low_compute", True),
    (10, "critical", "critical", True),
    (0, "critical", "critical", True),
    (-1, "dead", "dead", True),
])
def test_each_tier_boundary(cents: int, tier: str, state: str, low: bool) -> None:
    assert tier_for_credits(cents) == tier  # the one mapping, not a copy of it
    result = assess(fresh(cents), "normal", "running")
    assert result == SurvivalAssessment(tier, state, low, False, True, False)


def test_an_unknown_balance_keeps_the_previous_tier_and_is_never_dead() -> None:
    for previous in ("high", "normal", "low_compute", "critical"):
        result = assess(fresh(None), previous, "running")
        assert (result.tier, result.balance_known) == (previous, False)
    # With nothing known at all: cheap but alive, never "dead".
    first = assess(stale(None), None, "waking")
    assert (first.tier, first.state_to_enter, first.low_compute) == (UNKNOWN_START_TIER, "low_compute", True)
    assert first.tier != "dead"


def test_a_stale_debt_does_not_kill_but_a_stale_balance_sets_the_tier() -> None:
    assert assess(stale(-500), "normal", "running").tier == "normal"
    assert assess(stale(-500), None, "running").tier == UNKNOWN_START_TIER
    assert assess(stale(30), "high", "running").tier == "low_compute"
    assert assess(fresh(-500), "normal", "running").tier == "dead"


def test_dead_is_sticky_until_confirmed_positive_credits() -> None:
    for reading in (fresh(None), stale(None), fresh(0), fresh(-3), stale(1000), fresh(-1, 10 ** 9)):
        for previous, current in (("dead", "dead"), (None, "dead"), ("dead", "sleeping"), ("dead", "running")):
            result = assess(reading, previous, current)
            assert (result.tier, result.state_to_enter, result.funding_arrived) == ("dead", "dead", False), (
                reading, previous, current)
            assert result.low_compute
    revived = assess(fresh(1), "dead", "dead")
    assert revived == SurvivalAssessment("critical", "waking", True, False, True, True)
    assert assess(fresh(700), None, "dead").tier == "high"


def test_the_state_to_enter_is_always_a_legal_move() -> None:
    readings = [fresh(c, u) for c in (None, -5, 0, 10, 11, 50, 51, 500, 501) for u in (None, TOPUP_MIN_USDC_ATOMIC)]
    readings += [stale(c) for c in (None, -5, 0, 30, 900)]
    for reading, previous, current in itertools.product(readings, (None, *TIERS), AGENT_STATES):
        result = assess(reading, previous, current)
        assert can_transition(current, result.state_to_enter, funded=result.funding_arrived), (reading, previous, current)
        assert result.tier in TIERS


def test_sleeping_and_setup_are_left_alone_unless_confirmed_dead() -> None:
    assert assess(fresh(5), "normal", "sleeping").state_to_enter == "sleeping"
    assert assess(fresh(-5), "normal", "sleeping").state_to_enter == "dead"
    assert assess(fresh(900), None, "setup").state_to_enter == "setup"


@pytest.mark.parametrize("cents, usdc, expected", [
    (30, TOPUP_MIN_USDC_ATOMIC, True),          # low_compute, exactly $5
    (5, 20_000_000, True),                      # critical
    (-10, TOPUP_MIN_USDC_ATOMIC, True),         # dead: a top-up is the way back
    (30, TOPUP_MIN_USDC_ATOMIC - 1, False),     # $4.999999
    (5, None, False),                           # USDC unknown
    (100, 50_000_000, False),                   # normal: no need
    (1000, 50_000_000, False),                  # high
])
def test_the_top_up_decision(cents: int, usdc: int | None, expected: bool) -> None:
    assert assess(fresh(cents, usdc), "normal", "running").should_try_topup is expected


def test_no_top_up_on_a_balance_that_is_not_confirmed() -> None:
    assert not assess(stale(5, 20_000_000), "critical", "critical").should_try_topup
    assert not assess(fresh(None, 20_000_000), "critical", "critical").should_try_topup


# --------------------------------------------------------------------------- the financial cache


class Source:
    """A reader that counts calls and fails while told to."""

    def __init__(self, *values) -> None:
        self.values = list(values)
        self.calls = 0
        self.failing = False

    def __call__(self):
        self.calls += 1
        if self.failing:
            raise ConnectionError("unreachable")
        return self.values[min(self.calls - 1, len(self.values) - 1)]


def test_the_cache_asks_at_most_once_per_interval(clock) -> None:
    credits, usdc = Source(900, 800, 700), Source(10_000_000, 9_000_000)
    cache = FinancialCache(credits, usdc, now=clock, min_interval_s=60)
    assert cache.reading() == FinancialReading(900, True, 10_000_000)
    for _ in range(10):
        clock.advance(5_000)  # ten turns in 50 s
        assert cache.reading() == FinancialReading(900, True, 10_000_000)
    assert (credits.calls, usdc.calls) == (1, 1)
    clock.advance(9_999)
    assert cache.reading().credits_cents == 900
    clock.advance(1)  # 60 s after the first read
    assert cache.reading() == FinancialReading(800, True, 9_000_000)
    assert (credits.calls, usdc.calls) == (2, 2)


def test_the_cache_keeps_the_last_good_values_and_does_not_hammer_a_dead_source(clock) -> None:
    credits, usdc = Source(250), Source(6_000_000)
    cache = FinancialCache(credits, usdc, now=clock, min_interval_s=30)
    cache.reading()
    credits.failing = usdc.failing = True
    clock.advance(30_000)
    assert cache.reading() == FinancialReading(250, False, 6_000_000)
    clock.advance(10_000)
    cache.reading()
    assert (credits.calls, usdc.calls) == (2, 2)  # the failure is not retried before the interval
    credits.failing = usdc.failing = False
    clock.advance(20_000)
    assert cache.reading() == FinancialReading(250, True, 6_000_000)


def test_the_cache_before_any_good_read_knows_nothing(clock) -> None:
    credits = Source(1)
    credits.failing = True
    cache = FinancialCache(credits, None, now=clock)
    reading = cache.reading()
    assert reading == FinancialReading(None, False, None)
    assert assess(reading, None, "waking").tier == UNKNOWN_START_TIER


def test_the_cache_reads_the_conway_clients_reading_and_its_freshness(clock) -> None:
    credits = Source(CreditsReading(420, clock(), True), CreditsReading(420, clock(), False))
    cache = FinancialCache(credits, None, now=clock, min_interval_s=1)
    assert cache.reading() == FinancialReading(420, True, None)
    clock.advance(1000)
    assert cache.reading() == FinancialReading(420, False, None)


def test_invalidate_forces_the_next_read(clock) -> None:
    credits, usdc = Source(5, 505), Source(20_000_000, 15_000_000)
    cache = FinancialCache(credits, usdc, now=clock, min_interval_s=600)
    cache.reading()
    cache.invalidate()  # a top-up just happened
    assert cache.reading() == FinancialReading(505, True, 15_000_000)


def test_a_zero_interval_reads_every_time(clock) -> None:
    credits = Source(1, 2, 3)
    cache = FinancialCache(credits, None, now=clock, min_interval_s=0)
    assert [cache.reading().credits_cents for _ in range(3)] == [1, 2, 3]
    with pytest.raises(ValueError):
        FinancialCache(credits, None, now=clock, min_interval_s=-1)

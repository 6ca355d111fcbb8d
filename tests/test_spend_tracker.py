"""The spend tracker and the treasury limits (``money_out``): each limit allows just below its boundary and denies
past it."""

from __future__ import annotations

import pytest

from automaton_min.config import DEFAULT_TREASURY_POLICY
from automaton_min.home import Home
from automaton_min.store.db import open_database
from automaton_min.tiers import tier_for_credits
from automaton_min.treasury import money_out as out
from automaton_min.treasury.spend import SpendTracker
from automaton_min.clock import DAY_MS, HOUR_MS

POLICY = {**DEFAULT_TREASURY_POLICY, "minimumReserveCents": 0, "maxTransfersPerTurn": 100}
RICH = 10**9


@pytest.fixture
def spend(home: Home, clock):
    home.ensure()
    with open_database(home.default_db_path, now=clock) as db:
        yield SpendTracker(db, clock)


def transfer(spend: SpendTracker, cents: int) -> None:
    spend.record("transfer", cents, "transfer_credits", recipient="0x" + "11" * 20)


def refused(spend: SpendTracker, cents: int, policy=POLICY, *, turn: int = 0, balance: int | None = RICH) -> str | None:
    """The code of money_out's refusal of a transfer of ``cents``, or None when it is allowed."""
    refusal = out.limit_refusal(spend, policy, cents, transfers_this_turn=turn, balance_cents=balance)
    return refusal.code if refusal else None


def test_records_carry_the_reference_window_columns(spend: SpendTracker) -> None:
    spend.record("x402", 7, "x402_fetch", domain="conway.tech")
    assert spend.db.query("SELECT category, amount_cents, window_hour, window_day, created_at FROM spend_tracking") == [
        ("x402", 7, "2026-11-22T10", "2026-11-22", "2026-11-22T10:15:30.250Z")]


def test_windows_are_rolling_and_per_category(spend: SpendTracker, clock) -> None:
    transfer(spend, 100)
    spend.record("inference", 5, "inference")
    clock.advance(HOUR_MS - 1)
    assert spend.spent("transfer", HOUR_MS) == 100 and spend.spent("inference", HOUR_MS) == 5
    clock.advance(2)
    assert spend.spent("transfer", HOUR_MS) == 0 and spend.spent("transfer", DAY_MS) == 100
    clock.advance(DAY_MS)
    assert spend.spent("transfer", DAY_MS) == 0


def test_per_transfer_cap(spend: SpendTracker) -> None:
    cap = POLICY["maxSingleTransferCents"]
    assert refused(spend, cap) is None
    assert refused(spend, cap + 1) == out.OVER_SINGLE_CAP


def test_the_confirmation_threshold_counts_what_the_payee_got_in_the_last_hour(spend: SpendTracker, clock) -> None:
    payee, other = "0x" + "ab" * 20, "0x" + "cd" * 20
    spend.record("transfer", 600, "transfer_credits", recipient=payee)
    assert out.confirmation_refusal(spend, POLICY, payee.upper().replace("0X", "0x"), 400) is None
    refusal = out.confirmation_refusal(spend, POLICY, payee, 401)
    assert refusal and refusal.code == out.NEEDS_CONFIRMATION and "with the 600 sent to" in refusal.sentence()
    assert out.confirmation_refusal(spend, POLICY, other, 1000) is None
    clock.advance(HOUR_MS + 1)
    assert out.confirmation_refusal(spend, POLICY, payee, 1000) is None


def test_hourly_transfer_cap(spend: SpendTracker) -> None:
    transfer(spend, POLICY["maxHourlyTransferCents"] - 500)
    assert refused(spend, 500) is None
    assert refused(spend, 501) == out.OVER_HOURLY_CAP


def test_daily_transfer_cap(spend: SpendTracker, clock) -> None:
    for _ in range(5):
        transfer(spend, 4900)
        clock.advance(HOUR_MS + 1)
    assert refused(spend, 500) is None
    assert refused(spend, 501) == out.OVER_DAILY_CAP


def test_minimum_reserve_and_unknown_balance(spend: SpendTracker) -> None:
    policy = {**POLICY, "minimumReserveCents": 1000}
    assert refused(spend, 500, policy, balance=1500) is None
    assert refused(spend, 501, policy, balance=1500) == out.BELOW_RESERVE
    assert refused(spend, 1, policy, balance=None) == out.BALANCE_UNKNOWN


def test_never_more_than_half_the_balance(spend: SpendTracker) -> None:
    assert refused(spend, 500, balance=1000) is None
    assert refused(spend, 501, balance=1000) == out.HALF_BALANCE


def test_transfer_cooldown(spend: SpendTracker, clock) -> None:
    policy = {**POLICY, "transferCooldownMs": 60_000}
    transfer(spend, 10)
    clock.advance(59_999)
    assert refused(spend, 10, policy) == out.COOLING_DOWN
    clock.advance(1)
    assert refused(spend, 10, policy) is None


def test_transfers_per_turn(spend: SpendTracker) -> None:
    policy = {**POLICY, "maxTransfersPerTurn": 2}
    assert refused(spend, 10, policy, turn=1) is None
    assert refused(spend, 10, policy, turn=2) == out.OVER_TURN_COUNT


@pytest.mark.parametrize("amount", [0, -5])
def test_non_positive_transfers_are_refused(spend: SpendTracker, amount: int) -> None:
    assert refused(spend, amount) == out.BAD_AMOUNT


def test_inference_budget_daily_and_its_hourly_sixth(spend: SpendTracker, clock) -> None:
    policy = {**POLICY, "maxInferenceDailyCents": 600}  # hourly share 100
    spend.record("inference", 99, "inference")
    assert out.inference_refusal(spend, policy, 1) is None
    assert "hourly share" in out.inference_refusal(spend, policy, 2).sentence()
    for _ in range(5):
        clock.advance(HOUR_MS + 1)
        spend.record("inference", 100, "inference")
    clock.advance(HOUR_MS + 1)
    assert spend.spent("inference", DAY_MS) == 599
    assert out.inference_refusal(spend, policy, 1) is None
    assert "daily inference budget" in out.inference_refusal(spend, policy, 2).sentence()


def test_forget_and_retention(spend: SpendTracker, clock) -> None:
    kept = spend.record("x402", 3, "x402_fetch")
    gone = spend.record("x402", 4, "x402_fetch")
    spend.forget(gone)
    assert spend.spent("x402", HOUR_MS) == 3
    clock.advance(40 * DAY_MS)
    recent = spend.record("x402", 5, "x402_fetch")
    assert spend.prune(clock() - 30 * DAY_MS) == 1
    assert {row[0] for row in spend.db.query("SELECT id FROM spend_tracking")} == {recent} and kept != recent


def test_invalid_records_are_refused(spend: SpendTracker) -> None:
    with pytest.raises(ValueError):
        spend.record("gifts", 1, "x")
    with pytest.raises(ValueError):
        spend.record("x402", -1, "x")


@pytest.mark.parametrize(("cents", "tier"), [(10_000, "high"), (501, "high"), (500, "normal"), (51, "normal"), (50, "low_compute"),
                                             (11, "low_compute"), (10, "critical"), (0, "critical"), (-1, "dead")])
def test_one_tier_mapping(cents: int, tier: str) -> None:
    assert tier_for_credits(cents) == tier

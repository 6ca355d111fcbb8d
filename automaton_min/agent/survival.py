"""Survival: from a financial reading to a tier, a state, low-compute mode and a top-up decision.

Beyond README (The agent): an unknown balance keeps the previous tier (``UNKNOWN_START_TIER`` at first) and is never
``dead``; a stale one may set any tier but ``dead``, which needs a fresh negative balance and is left only for
``waking`` with ``funding_arrived`` on a fresh positive one. A top-up is tried at ``low_compute`` or below, on a fresh
balance, with at least $5 of USDC. The state to enter is always a legal move: a sleeping agent stays asleep unless
confirmed dead, and ``setup`` is left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from automaton_min.agent.states import AWAKE_STATES
from automaton_min.clock import Clock
from automaton_min.errors import AutomatonError
from automaton_min.log import get_logger
from automaton_min.tiers import tier_for_credits

log = get_logger(__name__)

TOPUP_MIN_USDC_ATOMIC = 5_000_000  # $5, the smallest credit top-up (6 decimals)
UNKNOWN_START_TIER = "low_compute"
LOW_COMPUTE_TIERS = frozenset({"low_compute", "critical", "dead"})
TOPUP_TIERS = frozenset({"low_compute", "critical", "dead"})
STATE_FOR_TIER = {"high": "running", "normal": "running", "low_compute": "low_compute", "critical": "critical",
                  "dead": "dead"}
DEFAULT_REFRESH_S = 60.0


@dataclass(frozen=True)
class FinancialReading:
    """What is known about the money. ``credits_cents`` None: never read. ``fresh``: the credits
    came from the API at the last refresh (False: the last known value, the API did not answer)."""

    credits_cents: int | None
    fresh: bool
    usdc_atomic: int | None


@dataclass(frozen=True)
class SurvivalAssessment:
    tier: str
    state_to_enter: str
    low_compute: bool
    should_try_topup: bool
    balance_known: bool = True
    funding_arrived: bool = False   # pass as ``funded=`` to ``set_agent_state`` to leave ``dead``


def assess(reading: FinancialReading, previous_tier: str | None, current_state: str) -> SurvivalAssessment:
    """The survival decision for one reading (pure: no I/O)."""
    credits = reading.credits_cents
    confirmed = credits is not None and reading.fresh
    funding_arrived = False
    if current_state == "dead" or previous_tier == "dead":
        if confirmed and credits > 0:
            tier, funding_arrived = tier_for_credits(credits), True
        else:
            tier = "dead"
    elif credits is None:
        tier = previous_tier or UNKNOWN_START_TIER
    else:
        tier = tier_for_credits(credits)
        if tier == "dead" and not confirmed:  # a stale debt does not kill
            tier = previous_tier or UNKNOWN_START_TIER

    if funding_arrived:
        state = "waking"
    elif tier == "dead":
        state = "dead" if current_state != "setup" else "setup"
    elif current_state in AWAKE_STATES or current_state == "waking":
        state = STATE_FOR_TIER[tier]
    else:  # sleeping, setup: only the wake cycle moves them
        state = current_state

    usdc = reading.usdc_atomic
    topup = confirmed and tier in TOPUP_TIERS and usdc is not None and usdc >= TOPUP_MIN_USDC_ATOMIC
    return SurvivalAssessment(tier, state, tier in LOW_COMPUTE_TIERS, topup, credits is not None, funding_arrived)


class FinancialCache:
    """Credits and USDC, each read at most every ``min_interval_s`` (a failure too: an outage costs no timeout per
    turn), last good values kept. ``read_credits()``: cents or a ``CreditsReading``; ``read_usdc``: atomic USDC, or
    None (no RPC node). ``invalidate()`` makes the next ``reading()`` ask both again."""

    def __init__(self, read_credits: Callable[[], Any], read_usdc: Callable[[], int] | None, *, now: Clock,
                 min_interval_s: float = DEFAULT_REFRESH_S) -> None:
        if min_interval_s < 0:
            raise ValueError("min_interval_s must not be negative")
        self._read_credits = read_credits
        self._read_usdc = read_usdc
        self._now = now
        self._interval_ms = int(min_interval_s * 1000)
        self._credits: int | None = None
        self._fresh = False
        self._usdc: int | None = None
        self._credits_asked: int | None = None
        self._usdc_asked: int | None = None

    def invalidate(self) -> None:
        self._credits_asked = self._usdc_asked = None

    def _due(self, asked: int | None, now_ms: int) -> bool:
        return asked is None or now_ms - asked >= self._interval_ms

    def reading(self) -> FinancialReading:
        now_ms = self._now()
        if self._due(self._credits_asked, now_ms):
            self._credits_asked = now_ms
            try:
                value = self._read_credits()
            except (AutomatonError, OSError) as exc:  # RPC, HTTP, API or socket failure: keep the last good value
                log.warning("credits unreadable; keeping the last known balance",
                            extra={"error": str(exc), "cents": self._credits})
                self._fresh = False
            else:
                cents = getattr(value, "cents", value)
                if isinstance(cents, int) and not isinstance(cents, bool):
                    self._credits, self._fresh = cents, bool(getattr(value, "fresh", True))
                else:
                    log.warning("credits reader returned no number", extra={"value": repr(value)[:80]})
                    self._fresh = False
        if self._read_usdc is not None and self._due(self._usdc_asked, now_ms):
            self._usdc_asked = now_ms
            try:
                usdc = self._read_usdc()
            except (AutomatonError, OSError) as exc:
                log.warning("USDC balance unreadable; keeping the last known one",
                            extra={"error": str(exc), "usdc_atomic": self._usdc})
            else:
                self._usdc = int(usdc)
        return FinancialReading(self._credits, self._fresh, self._usdc)

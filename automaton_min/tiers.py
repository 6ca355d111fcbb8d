"""Survival tiers: the one mapping from credits to tier, used everywhere (thresholds: README, Clients). An unknown
balance is not a tier: callers keep the last known one.
"""

from __future__ import annotations

TIERS = ("dead", "critical", "low_compute", "normal", "high")
TIER_RANK = {name: rank for rank, name in enumerate(TIERS)}


def tier_for_credits(cents: int) -> str:
    """The survival tier for a confirmed credit balance in cents."""
    if cents > 500:
        return "high"
    if cents > 50:
        return "normal"
    if cents > 10:
        return "low_compute"
    if cents >= 0:
        return "critical"
    return "dead"

"""The spend tracker (``spend_tracking``) and the treasury limits that read it.

Every cent that leaves is recorded here with its real amount: credit transfers,
x402 payments, top-ups (category ``other``) and inference. Windows are rolling
(the last 60 minutes, the last 24 hours), so a limit cannot be doubled by
spending just before and just after the top of an hour. ``window_hour`` and
``window_day`` are still filled in for the reference runtime's readers.

A check returns ``None`` when the spend is allowed, or a ``Denial`` naming the
limit; allowed means ``spent + amount <= limit``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from automaton_min.clock import Clock, system_now, to_iso
from automaton_min.ids import new_ulid

if TYPE_CHECKING:
    from automaton_min.store.db import Database

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
CATEGORIES = ("transfer", "x402", "inference", "other")


@dataclass(frozen=True)
class Denial:
    """A spend the treasury policy does not allow: which limit, and a sentence for the model or the user."""

    limit: str
    message: str


class SpendTracker:
    """Records spending and answers how much was spent in a window."""

    def __init__(self, db: "Database", now: Clock = system_now) -> None:
        self.db = db
        self.now = now

    def record(self, category: str, amount_cents: int, tool_name: str, *, recipient: str | None = None,
               domain: str | None = None, spend_id: str | None = None) -> str:
        """Insert one spend row (inside the caller's transaction when there is one); returns its id."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown spend category {category!r}")
        if amount_cents < 0:
            raise ValueError("a spend is never negative")
        now_ms = self.now()
        stamp = to_iso(now_ms)
        row_id = spend_id or new_ulid(now_ms)
        self.db.execute(
            "INSERT INTO spend_tracking (id, tool_name, amount_cents, recipient, domain, category, window_hour, window_day, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (row_id, tool_name, amount_cents, recipient, domain, category, stamp[:13], stamp[:10], stamp),
        )
        return row_id

    def forget(self, spend_id: str) -> None:
        """Remove a spend that turned out never to happen (a refused or expired payment)."""
        self.db.execute("DELETE FROM spend_tracking WHERE id = ?", (spend_id,))

    def spent(self, category: str, window_ms: int) -> int:
        """Cents spent in ``category`` during the last ``window_ms``."""
        since = to_iso(self.now() - window_ms)
        return int(self.db.scalar(
            "SELECT COALESCE(SUM(amount_cents), 0) FROM spend_tracking WHERE category = ? AND created_at >= ?",
            (category, since), default=0,
        ))

    def last_spend_ms(self, category: str, tool_name: str | None = None) -> int | None:
        """When the latest spend of ``category`` (and tool) happened, in epoch ms."""
        from automaton_min.clock import from_iso

        query = "SELECT MAX(created_at) FROM spend_tracking WHERE category = ?"
        params: tuple[Any, ...] = (category,)
        if tool_name:
            query += " AND tool_name = ?"
            params += (tool_name,)
        stamp = self.db.scalar(query, params)
        return from_iso(stamp) if stamp else None

    def prune(self, older_than_ms: int) -> int:
        """Retention: delete rows older than ``older_than_ms`` (keep at least the daily window)."""
        cutoff = min(older_than_ms, self.now() - DAY_MS)
        self.db.execute("DELETE FROM spend_tracking WHERE created_at < ?", (to_iso(cutoff),))
        return self.db.connection.changes()

    def _within(self, category: str, amount: int, limit: int, window_ms: int, name: str, label: str) -> Denial | None:
        spent = self.spent(category, window_ms)
        if spent + amount > limit:
            return Denial(name, f"{label}: {spent} + {amount} cents would pass the limit of {limit} cents")
        return None

    def check_transfer(self, amount_cents: int, policy: Mapping[str, Any], *, transfers_this_turn: int,
                       balance_cents: int | None) -> Denial | None:
        """Every treasury limit on a credit transfer: size, hourly, daily, reserve, cooldown, per turn."""
        if amount_cents <= 0:
            return Denial("amount", "a transfer must be a positive number of cents")
        if amount_cents > policy["maxSingleTransferCents"]:
            return Denial("maxSingleTransferCents", f"{amount_cents} cents is above the per-transfer cap of {policy['maxSingleTransferCents']} cents")
        if transfers_this_turn >= policy["maxTransfersPerTurn"]:
            return Denial("maxTransfersPerTurn", f"already {transfers_this_turn} transfers this turn (limit {policy['maxTransfersPerTurn']})")
        cooldown = policy["transferCooldownMs"]
        last = self.last_spend_ms("transfer")
        if cooldown and last is not None and self.now() - last < cooldown:
            return Denial("transferCooldownMs", f"the last transfer was {self.now() - last} ms ago; wait {cooldown} ms between transfers")
        denial = (self._within("transfer", amount_cents, policy["maxHourlyTransferCents"], HOUR_MS, "maxHourlyTransferCents", "hourly transfer cap")
                  or self._within("transfer", amount_cents, policy["maxDailyTransferCents"], DAY_MS, "maxDailyTransferCents", "daily transfer cap"))
        if denial:
            return denial
        if balance_cents is None:
            return Denial("minimumReserveCents", "the credit balance is unknown, so the minimum reserve cannot be checked")
        if balance_cents - amount_cents < policy["minimumReserveCents"]:
            return Denial("minimumReserveCents", f"transferring would leave {balance_cents - amount_cents} cents, below the reserve of {policy['minimumReserveCents']} cents")
        return None

    def check_inference(self, estimated_cents: int, policy: Mapping[str, Any]) -> Denial | None:
        """The daily inference budget (and its hourly sixth, as in the reference)."""
        daily = policy["maxInferenceDailyCents"]
        hourly = -(-daily // 6)
        return (self._within("inference", estimated_cents, hourly, HOUR_MS, "maxInferenceDailyCents", "hourly share of the inference budget")
                or self._within("inference", estimated_cents, daily, DAY_MS, "maxInferenceDailyCents", "daily inference budget"))

"""The spend tracker (``spend_tracking``): every cent that leaves (transfers, x402, top-ups as ``other``, inference).

Windows are rolling (the last 60 minutes, the last 24 hours), so a limit cannot be doubled across the top of an
hour. ``window_hour`` and ``window_day`` are still filled in for the reference runtime's readers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from automaton_min.clock import DAY_MS, Clock, from_iso, system_now, to_iso
from automaton_min.ids import new_ulid

if TYPE_CHECKING:
    from automaton_min.store.db import Database

CATEGORIES = ("transfer", "x402", "inference", "other")


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
            "INSERT INTO spend_tracking (id, tool_name, amount_cents, recipient, domain, category, window_hour,"
            " window_day, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (row_id, tool_name, amount_cents, recipient, domain, category, stamp[:13], stamp[:10], stamp),
        )
        return row_id

    def forget(self, spend_id: str) -> None:
        """Remove a spend that turned out never to happen (a refused or expired payment)."""
        self.db.execute("DELETE FROM spend_tracking WHERE id = ?", (spend_id,))

    def spent(self, category: str, window_ms: int, recipient: str | None = None) -> int:
        """Cents spent in ``category`` during the last ``window_ms`` (to ``recipient`` only, when given)."""
        since = to_iso(self.now() - window_ms)
        return int(self.db.scalar(
            "SELECT COALESCE(SUM(amount_cents), 0) FROM spend_tracking WHERE category = ? AND created_at >= ?"
            " AND (?3 IS NULL OR lower(recipient) = lower(?3))", (category, since, recipient), default=0,
        ))

    def last_spend_ms(self, category: str) -> int | None:
        """When the latest spend of ``category`` happened, in epoch ms."""
        stamp = self.db.scalar("SELECT MAX(created_at) FROM spend_tracking WHERE category = ?", (category,))
        return from_iso(stamp) if stamp else None

    def prune(self, older_than_ms: int) -> int:
        """Retention: delete rows older than ``older_than_ms`` (keep at least the daily window)."""
        cutoff = min(older_than_ms, self.now() - DAY_MS)
        self.db.execute("DELETE FROM spend_tracking WHERE created_at < ?", (to_iso(cutoff),))
        return self.db.connection.changes()

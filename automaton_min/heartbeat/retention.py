"""Retention: every table that grows is pruned by the heartbeat, a few hundred rows per statement (README: Heartbeat).
Each batch is its own short transaction; open work (unprocessed inbox rows, open payment intents, unconsumed wake
events, spend inside its daily window) is never removed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from automaton_min.clock import DAY_MS, from_iso, to_iso

if TYPE_CHECKING:
    from automaton_min.config import Config
    from automaton_min.store.db import Database

BATCH = 500
MAX_BATCHES = 40  # per table and run: at most 20,000 rows each time, the rest at the next run
TIME_BUDGET_S = 60.0
DEFAULT_TURNS_KEEP = 10_000
KEEP_DAYS = {
    "heartbeat_history": 7,
    "wake_events": 7,
    "metric_snapshots": 7,
    "inbox_messages": 7,
    "spend_tracking": 2,
    "inference_costs": 30,
    "policy_decisions": 30,
    "payment_intents": 30,
    "sent_messages": 7,
    "failed_turns": 7,
}


def batch_cutoff(db: "Database", table: str, column: str, cutoff_ms: int, where: str = "") -> int:
    """A cutoff no later than ``cutoff_ms`` below which at most about ``BATCH`` qualifying rows lie."""
    extra = f" AND {where}" if where else ""
    nth = db.scalar(f"SELECT {column} FROM {table} WHERE {column} < ?{extra} ORDER BY {column} LIMIT 1 OFFSET ?",
                    (to_iso(cutoff_ms), BATCH))
    if nth is None:
        return cutoff_ms
    oldest = db.scalar(f"SELECT MIN({column}) FROM {table} WHERE {column} < ?{extra}", (to_iso(cutoff_ms),))
    step = from_iso(nth)
    return step + 1 if oldest == nth else step  # hundreds of rows at one instant: take them all at once


def _delete_batch(db: "Database", table: str, key: str, condition: str, params: tuple[Any, ...]) -> int:
    db.execute(f"DELETE FROM {table} WHERE {key} IN (SELECT {key} FROM {table} WHERE {condition} LIMIT {BATCH})",
               params)
    return db.connection.changes()


def _keep_newest(db: "Database", table: str, order: str, keep: int) -> int:
    """One batch of ``table``'s oldest rows (by ``order``) beyond the newest ``keep``."""
    excess = int(db.scalar(f"SELECT COUNT(*) FROM {table}", default=0)) - keep
    if excess <= 0:
        return 0
    db.execute(f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} ORDER BY {order} LIMIT ?)",
               (min(BATCH, excess),))
    return db.connection.changes()


def _repeat(step: Callable[[], int], deadline: float, stop: Any) -> int:
    """Run ``step`` until it removes less than a batch, the budget is spent or a stop is asked."""
    total = 0
    for _ in range(MAX_BATCHES):
        removed = step()
        total += removed
        if removed < BATCH or time.monotonic() > deadline or (stop is not None and stop.is_set()):
            break
    return total


def memory_stores(db: "Database", now_ms: int) -> dict[str, Any]:
    """The memory stores by table, for their size bounds (working memory also drops what has expired)."""
    from automaton_min.memory.stores import STORES

    return {store.TABLE.name: store(db, lambda: now_ms) for store in STORES}  # one instant for the whole run


def turns_keep(config: "Config") -> int:
    retention = config.get("retention") or {}
    value = retention.get("turnsKeep", DEFAULT_TURNS_KEEP) if isinstance(retention, dict) else DEFAULT_TURNS_KEEP
    return int(value)


def prune_all(db: "Database", config: "Config", now_ms: int, *, stop: Any = None) -> dict[str, int]:
    """Prune every growing table once; returns the rows removed per table (tables with none left out)."""
    from automaton_min.inference.router import prune_inference_costs
    from automaton_min.store.wake import prune_consumed
    from automaton_min.store.inbox import prune_processed
    from automaton_min.store.modifications import KEEP as MODIFICATIONS_KEPT
    from automaton_min.goals.events import KEEP as EVENTS_KEPT
    from automaton_min.store.goals import prune_ended
    from automaton_min.store.turns import prune_turns
    from automaton_min.treasury.ledger import prune_resolved
    from automaton_min.treasury.spend import SpendTracker

    deadline = time.monotonic() + TIME_BUDGET_S

    def older(table: str) -> int:
        return now_ms - KEEP_DAYS[table] * DAY_MS

    def by_cutoff(prune: Callable[[int], int], table: str, column: str, where: str = "") -> Callable[[], int]:
        return lambda: prune(batch_cutoff(db, table, column, older(table), where))

    inbox_done = "(status IN ('processed', 'failed') OR processed_at IS NOT NULL) AND status != 'in_progress'"
    keep = turns_keep(config)

    def turns_step() -> int:
        count = int(db.scalar("SELECT COUNT(*) FROM turns", default=0))
        return prune_turns(db, max(keep, count - BATCH)) if count > keep else 0

    steps: dict[str, Callable[[], int]] = {
        "heartbeat_history": lambda: _delete_batch(db, "heartbeat_history", "id", "started_at < ?",
                                                   (to_iso(older("heartbeat_history")),)),
        "heartbeat_dedup": lambda: _delete_batch(db, "heartbeat_dedup", "dedup_key", "expires_at <= ?",
                                                 (to_iso(now_ms),)),
        "wake_events": lambda: prune_consumed(db, older("wake_events"), batch=BATCH),
        "metric_snapshots": lambda: _delete_batch(db, "metric_snapshots", "id", "snapshot_at < ?",
                                                  (to_iso(older("metric_snapshots")),)),
        "inbox_messages": by_cutoff(lambda c: prune_processed(db, c), "inbox_messages",
                                    "COALESCE(processed_at, received_at)", inbox_done),
        "spend_tracking": by_cutoff(lambda c: SpendTracker(db, now=lambda: now_ms).prune(c), "spend_tracking",
                                    "created_at"),
        "inference_costs": by_cutoff(lambda c: prune_inference_costs(db, c), "inference_costs", "created_at"),
        "policy_decisions": lambda: _delete_batch(db, "policy_decisions", "id", "created_at < ?",
                                                  (to_iso(older("policy_decisions")),)),
        "payment_intents": by_cutoff(lambda c: prune_resolved(db, c), "payment_intents", "created_at",
                                     "status IN ('settled', 'rejected', 'expired')"),
        "sent_messages": lambda: _delete_batch(db, "sent_messages", "message_id", "created_at < ?",
                                               (to_iso(older("sent_messages")),)),
        "turns": turns_step,
        "modifications": lambda: _keep_newest(db, "modifications", "id", MODIFICATIONS_KEPT),
        "event_stream": lambda: _keep_newest(db, "event_stream", "created_at, id", EVENTS_KEPT),
        "goals": lambda: prune_ended(db, batch=BATCH),
        "failed_turns": lambda: _delete_batch(db, "failed_turns", "id", "timestamp < ?",
                                              (to_iso(older("failed_turns")),)),
    }
    removed: dict[str, int] = {}
    for table, store in memory_stores(db, now_ms).items():  # each keeps its own bound, in batches of its own
        steps[table] = store.prune
    for table, step in steps.items():
        if time.monotonic() > deadline or (stop is not None and stop.is_set()):
            break
        count = _repeat(step, deadline, stop)
        if count:
            removed[table] = count
    return removed

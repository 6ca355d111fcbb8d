"""Wake events (``wake_events``, README: The service): what asks a sleeping agent to wake, stored and consumed once.

Events whose work a cycle already picked up (messages claimed before a turn) do not cut the next sleep short:
``take_pending`` drops them by source and time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from automaton_min.store.kv import json_object
from automaton_min.clock import from_iso, to_iso
from automaton_min.log import get_logger

if TYPE_CHECKING:
    from automaton_min.home import Home
    from automaton_min.store.sqlite import Database

log = get_logger(__name__)

# Sources whose work is a message the loop claims from the inbox before every turn.
INBOX_SOURCES = frozenset({"inbox", "social"})
MAX_REASON_CHARS = 500


@dataclass(frozen=True)
class WakeEvent:
    id: int
    source: str
    reason: str
    payload: dict[str, Any]
    created_at: str


OWNER_WAKE_SOURCE = "cli"  # a wake event the owner posted (`automaton-min wake`, `goals add`): their own words


def post_wake(db: "Database", source: str, reason: str, payload: dict[str, Any] | None = None, *, now_ms: int) -> int:
    """Store one wake event (exactly one row: the reference stored two) and return its id."""
    db.execute("INSERT INTO wake_events (source, reason, payload, created_at) VALUES (?, ?, ?, ?)",
               (source, reason[:MAX_REASON_CHARS], orjson.dumps(payload or {}).decode(), to_iso(now_ms)))
    return int(db.connection.last_insert_rowid())


def consume_all(db: "Database", *, now_ms: int) -> list[WakeEvent]:
    """Mark every unconsumed event consumed and return them, oldest first, in one transaction."""
    with db.transaction():
        rows = db.query("SELECT id, source, reason, payload, created_at FROM wake_events WHERE consumed_at IS NULL "
                        "ORDER BY id")
        if rows:
            db.execute("UPDATE wake_events SET consumed_at = ? WHERE consumed_at IS NULL AND id <= ?",
                       (to_iso(now_ms), rows[-1][0]))
    return [WakeEvent(r[0], r[1], r[2], json_object(r[3]), r[4]) for r in rows]


def take_pending(db: "Database", *, now_ms: int, picked_up_before_ms: int | None) -> list[WakeEvent]:
    """Consume the pending events and return those that should wake the agent: all but inbox-type events stored
    before the cycle's last inbox check (their messages were already read)."""
    events = consume_all(db, now_ms=now_ms)
    if picked_up_before_ms is None:
        return events
    return [e for e in events if e.source not in INBOX_SOURCES or from_iso(e.created_at) > picked_up_before_ms]


def woken_since(db: "Database", since: str) -> bool:
    """Whether a wake event other than the inbox's (the loop reads those messages itself) came at or after ``since``."""
    return db.scalar("SELECT 1 FROM wake_events WHERE created_at >= ? AND source NOT IN ('inbox', 'social')",
                     (since,)) is not None


def prune_consumed(db: "Database", older_than_ms: int, *, batch: int = 500) -> int:
    """Delete up to ``batch`` consumed events older than ``older_than_ms``; returns how many."""
    db.execute("DELETE FROM wake_events WHERE id IN (SELECT id FROM wake_events WHERE consumed_at IS NOT NULL "
               "AND consumed_at < ? ORDER BY id LIMIT ?)", (to_iso(older_than_ms), batch))
    return db.connection.changes()


@dataclass(frozen=True)
class WakeEventLog:
    """The recent wake events a turn's context shows (as compact references), newest first."""

    db: "Database"
    limit: int = 5
    window_ms: int = 24 * 3600 * 1000

    def recent(self, now_ms: int) -> list[WakeEvent]:
        rows = self.db.query("SELECT id, source, reason, payload, created_at FROM wake_events WHERE created_at >= ?"
                             " ORDER BY id DESC LIMIT ?", (to_iso(now_ms - self.window_ms), self.limit))
        return [WakeEvent(r[0], r[1], r[2], json_object(r[3]), r[4]) for r in rows]


class WakeBus:
    """In the daemon: store a wake event, then set the signal the main thread sleeps on. Safe from any thread
    (each thread passes its own database connection)."""

    def __init__(self, signal_event: threading.Event) -> None:
        self.signal = signal_event

    def request(self, db: "Database", source: str, reason: str, payload: dict[str, Any] | None = None, *,
                now_ms: int) -> int:
        event_id = post_wake(db, source, reason, payload, now_ms=now_ms)
        log.info("wake requested", extra={"source": source, "reason": reason[:120]})
        self.signal.set()
        return event_id

"""``event_stream`` (the reference's table): what happened to goals and tasks, newest last, for the context and
``logs`` (README: Goals). Retention keeps the newest ``KEEP`` rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from automaton_min.clock import to_iso
from automaton_min.ids import new_ulid

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

KEEP = 2_000
CONTENT_LIMIT = 1_000


@dataclass(frozen=True)
class Event:
    type: str
    actor: str
    goal_id: str | None
    task_id: str | None
    content: str
    created_at: str


def record_event(db: "Database", kind: str, actor: str, content: str, now_ms: int, *, goal_id: str | None = None,
                 task_id: str | None = None) -> None:
    """One row (inside the caller's transaction); ``actor``: the address that caused it (the agent's own, a child's)."""
    content = content[:CONTENT_LIMIT]
    db.execute("INSERT INTO event_stream (id, type, agent_address, goal_id, task_id, content, token_count, "
               "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
               (new_ulid(now_ms), kind, actor or "", goal_id, task_id, content, len(content) // 4 + 1,
                to_iso(now_ms)))


def recent_events(db: "Database", *, limit: int = 10, goal_id: str | None = None,
                  leave_out: tuple[str, ...] = ()) -> list[Event]:
    """The newest ``limit`` events (of one goal, if given; none of the types in ``leave_out``), oldest first."""
    where, params = ["1"], []
    if goal_id:
        where, params = where + ["goal_id = ?"], params + [goal_id]
    if leave_out:
        where.append(f"type NOT IN ({', '.join('?' * len(leave_out))})")
        params += list(leave_out)
    rows = db.query(f"SELECT type, agent_address, goal_id, task_id, content, created_at FROM event_stream "
                    f"WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT ?", (*params, limit))
    return [Event(*row) for row in reversed(rows)]


def events_since(db: "Database", at: str | None, limit: int) -> list[dict[str, str]]:
    """The newest ``limit`` events at or after ``at`` (None: any), oldest first, as ``logs`` shows changes
    (``at``, ``type``, ``description``); none before the table exists."""
    from automaton_min.store.sqlite import table_exists

    if not table_exists(db, "event_stream"):
        return []
    rows = db.query("SELECT created_at, type, content FROM event_stream WHERE created_at >= ? "
                    "ORDER BY created_at DESC, id DESC LIMIT ?", (at or "", limit))
    return [{"at": when, "type": kind, "description": text} for when, kind, text in reversed(rows)]

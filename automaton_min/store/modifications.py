"""``modifications``: the append-only audit log of changes to the agent itself (the reference's columns): updates
applied, refused and rolled back (README: Updates)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from automaton_min.clock import SQL_NOW, to_iso
from automaton_min.ids import new_ulid

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

KEEP = 1000  # rows; retention drops the oldest beyond this

TABLE = f"""
CREATE TABLE IF NOT EXISTS modifications (
    id TEXT PRIMARY KEY,
    timestamp TEXT NOT NULL,
    type TEXT NOT NULL,
    description TEXT NOT NULL,
    file_path TEXT,
    diff TEXT,
    reversible INTEGER DEFAULT 1,
    created_at TEXT NOT NULL DEFAULT ({SQL_NOW})
);
CREATE INDEX IF NOT EXISTS idx_modifications_type ON modifications(type);
"""


def create_modifications(db: "Database") -> None:
    db.execute(TABLE)


def record(db: "Database", kind: str, description: str, now_ms: int, *, file_path: str | None = None,
           diff: str | None = None, reversible: bool = True) -> str:
    row_id = new_ulid(now_ms)
    db.execute("INSERT INTO modifications (id, timestamp, type, description, file_path, diff, reversible) "
               "VALUES (?, ?, ?, ?, ?, ?, ?)", (row_id, to_iso(now_ms), kind, description, file_path, diff,
                                                int(reversible)))
    return row_id


def recent(db: "Database", limit: int = 5, kinds: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    where = f"WHERE type IN ({', '.join('?' * len(kinds))})" if kinds else ""
    rows = db.query(f"SELECT timestamp, type, description FROM modifications {where} ORDER BY id DESC LIMIT ?",
                    (*kinds, limit))
    return [{"at": at, "type": kind, "description": text} for at, kind, text in rows]


def since(db: "Database", at: str | None, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` rows at or after ``at`` (an ISO time; None: any), oldest first; none before the table
    exists."""
    from automaton_min.store.sqlite import table_exists

    if not table_exists(db, "modifications"):
        return []
    rows = db.query("SELECT timestamp, type, description FROM modifications WHERE timestamp >= ? ORDER BY id DESC "
                    "LIMIT ?", (at or "", limit))
    return [{"at": at_, "type": kind, "description": text} for at_, kind, text in reversed(rows)]


def latest_change(db: "Database", prefix: str) -> dict[str, Any] | None:
    """The newest row whose type starts with ``prefix`` (None before the table exists: a read-only open of an
    older database)."""
    from automaton_min.store.sqlite import table_exists

    if not table_exists(db, "modifications"):
        return None
    found = db.query("SELECT timestamp, type, description FROM modifications WHERE type LIKE ? ORDER BY id DESC "
                     "LIMIT 1", (prefix + "%",))
    return {"at": found[0][0], "type": found[0][1], "description": found[0][2]} if found else None

"""Reading the ``turns`` table (writing comes with the agent loop)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from automaton_min.store.db import Database


def count_turns(db: "Database") -> int:
    return int(db.scalar("SELECT COUNT(*) FROM turns", default=0))


def last_turn_timestamp(db: "Database") -> str | None:
    """Timestamp of the newest turn (uses ``idx_turns_timestamp``)."""
    return db.scalar("SELECT MAX(timestamp) FROM turns")

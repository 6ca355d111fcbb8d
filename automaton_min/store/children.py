"""``children`` and ``child_lifecycle_events`` (the reference's columns): the agents this one spawned, and every
step of each one's life (README: Children)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from automaton_min.clock import SQL_NOW

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

# The eleven lifecycle states, in the order a healthy child passes them; cleaned_up is the end.
STATES = ("requested", "sandbox_created", "runtime_ready", "wallet_verified", "funded", "starting", "healthy",
          "unhealthy", "stopped", "failed", "cleaned_up")
GONE = ("failed", "cleaned_up")  # not alive: what `status` and system_synopsis leave out of "alive"
# A child whose wallet the parent verified and that is not stopped or gone: it may be funded (a known payee).
FUNDABLE = ("wallet_verified", "funded", "starting", "healthy", "unhealthy")

TABLES = f"""
CREATE TABLE IF NOT EXISTS children (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    address TEXT,
    sandbox_id TEXT,
    genesis_prompt TEXT NOT NULL,
    creator_message TEXT,
    funded_amount_cents INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'spawning',
    created_at TEXT NOT NULL DEFAULT ({SQL_NOW}),
    last_checked TEXT,
    role TEXT DEFAULT 'generalist',
    chain_type TEXT DEFAULT 'evm'
);
CREATE INDEX IF NOT EXISTS idx_children_status ON children(status);
CREATE TABLE IF NOT EXISTS child_lifecycle_events (
    id TEXT PRIMARY KEY,
    child_id TEXT NOT NULL REFERENCES children(id),
    from_state TEXT,
    to_state TEXT NOT NULL CHECK (to_state IN ({", ".join(repr(state) for state in STATES)})),
    reason TEXT,
    metadata TEXT NOT NULL DEFAULT '{{}}',
    created_at TEXT NOT NULL DEFAULT ({SQL_NOW})
);
CREATE INDEX IF NOT EXISTS idx_child_events ON child_lifecycle_events(child_id, created_at);
"""


def create_children(db: "Database") -> None:
    """The tables (a reference database has ``children`` from its first version: it gains the later columns)."""
    from automaton_min.store.sqlite import add_missing_columns

    db.execute(TABLES)
    add_missing_columns(db, "children", {"role": "TEXT DEFAULT 'generalist'", "chain_type": "TEXT DEFAULT 'evm'"})


@dataclass(frozen=True)
class Child:
    id: str
    name: str
    address: str | None
    sandbox_id: str | None
    status: str
    funded_amount_cents: int
    created_at: str
    last_checked: str | None


_COLUMNS = "id, name, address, sandbox_id, status, funded_amount_cents, created_at, last_checked"


def _child(row: tuple) -> Child:
    child_id, name, address, sandbox_id, *rest = row
    return Child(child_id, name, address or None, sandbox_id or None, *rest)  # '': not known yet


def list_children(db: "Database") -> list[Child]:
    """Every child, oldest first."""
    return [_child(row) for row in db.query(f"SELECT {_COLUMNS} FROM children ORDER BY created_at, id")]


def get_child(db: "Database", child_id: str) -> Child | None:
    row = db.query_one(f"SELECT {_COLUMNS} FROM children WHERE id = ?", (child_id,))
    return _child(row) if row else None


def fundable_addresses(db: "Database") -> frozenset[str]:
    """The verified wallet addresses (lowercase) of the children that may be funded."""
    from automaton_min.store.sqlite import table_exists

    if not table_exists(db, "children"):
        return frozenset()
    rows = db.query(f"SELECT address FROM children WHERE address != '' AND status IN "
                    f"({', '.join('?' * len(FUNDABLE))})", FUNDABLE)
    return frozenset(row[0].lower() for row in rows if row[0])


def counts(db: "Database") -> tuple[int, int]:
    """(alive, total): alive is every child not failed or cleaned up."""
    from automaton_min.store.sqlite import table_exists

    if not table_exists(db, "children"):  # a read-only open of a database older than the table
        return 0, 0
    total = int(db.scalar("SELECT COUNT(*) FROM children", default=0))
    gone = int(db.scalar(f"SELECT COUNT(*) FROM children WHERE status IN ({', '.join('?' * len(GONE))})", GONE,
                         default=0))
    return total - gone, total

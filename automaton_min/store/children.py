"""``children`` and ``child_lifecycle_events`` (the reference's columns): the agents this one spawned, and every
step of each one's life (README: Children)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from automaton_min.clock import SQL_NOW, to_iso
from automaton_min.ids import new_ulid

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

# The eleven lifecycle states, in the order a healthy child passes them; cleaned_up is the end.
STATES = ("requested", "sandbox_created", "runtime_ready", "wallet_verified", "funded", "starting", "healthy",
          "unhealthy", "stopped", "failed", "cleaned_up")
GONE = ("failed", "cleaned_up")  # not alive: what `status` and system_synopsis leave out of "alive"
# A child whose wallet the parent verified and that is not stopped or gone: it may be funded (a known payee).
FUNDABLE = ("wallet_verified", "funded", "starting", "healthy", "unhealthy")
# The one table of allowed steps (children/lifecycle.py moves children along it; funding takes wallet_verified to
# funded here, for every path credits reach a child by).
NEXT: dict[str, tuple[str, ...]] = {
    "requested": ("sandbox_created", "failed"),
    "sandbox_created": ("runtime_ready", "failed"),
    "runtime_ready": ("wallet_verified", "failed"),
    "wallet_verified": ("funded", "starting", "failed"),
    "funded": ("starting", "failed"),
    "starting": ("healthy", "unhealthy", "failed"),
    "healthy": ("unhealthy", "stopped"),
    "unhealthy": ("healthy", "starting", "stopped", "failed"),
    "stopped": ("starting", "failed", "cleaned_up"),
    "failed": ("cleaned_up",),
    "cleaned_up": (),
}
assert set(NEXT) == set(STATES)
FUNDING_PREFIX = "child_funding."  # kv: child_funding.<child id> names a funding on its way (children/funding.py)

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


def names_by_address(db: "Database") -> dict[str, str]:
    """Every child with a verified wallet: lowercase address -> name (whatever its state: a message from it is
    still from a child)."""
    from automaton_min.store.sqlite import table_exists

    if not table_exists(db, "children"):
        return {}
    return {row[0].lower(): row[1] for row in db.query("SELECT address, name FROM children WHERE address != ''")
            if row[0]}


def begun_since(db: "Database", since_iso: str) -> int:
    """Children whose spawn began at or after ``since_iso`` (whatever became of them)."""
    from automaton_min.store.sqlite import table_exists

    if not table_exists(db, "children"):
        return 0
    return int(db.scalar("SELECT COUNT(*) FROM children WHERE created_at >= ?", (since_iso,), default=0))


def counts(db: "Database") -> tuple[int, int]:
    """(alive, total): alive is every child not failed or cleaned up."""
    from automaton_min.store.sqlite import table_exists

    if not table_exists(db, "children"):  # a read-only open of a database older than the table
        return 0, 0
    total = int(db.scalar("SELECT COUNT(*) FROM children", default=0))
    gone = int(db.scalar(f"SELECT COUNT(*) FROM children WHERE status IN ({', '.join('?' * len(GONE))})", GONE,
                         default=0))
    return total - gone, total


def fundable_child(db: "Database", child_id: str) -> Child | None:
    """The child of that id if it may be funded (a verified wallet, not stopped or gone), else ``None``."""
    child = get_child(db, child_id) if isinstance(child_id, str) else None
    return child if child is not None and child.status in FUNDABLE and child.address else None


def insert_event(db: "Database", child_id: str, from_state: str | None, to_state: str, reason: str,
                 metadata: dict, now_ms: int) -> None:
    """One ``child_lifecycle_events`` row (inside the caller's transaction)."""
    db.execute("INSERT INTO child_lifecycle_events (id, child_id, from_state, to_state, reason, metadata, created_at) "
               "VALUES (?, ?, ?, ?, ?, ?, ?)", (new_ulid(now_ms), child_id, from_state, to_state, reason,
                                                orjson.dumps(metadata).decode(), to_iso(now_ms)))


def record_funding(db: "Database", address: str, cents: int, why: str, now_ms: int, *,
                   name: str | None = None) -> None:
    """Credits reached the child with this wallet (inside the caller's transaction): its ``funded_amount_cents``
    grows, and a child not funded before moves from ``wallet_verified`` to ``funded``. ``name``: the transfer's
    Idempotency-Key; a funding of that name ends with its record, so a restart never sends or records it again."""
    from automaton_min.store.sqlite import table_exists

    if name:
        db.execute("DELETE FROM kv WHERE key GLOB ? AND value = ?", (FUNDING_PREFIX + "*", name))
    if not table_exists(db, "children"):
        return
    for child_id, status in db.query("SELECT id, status FROM children WHERE address != '' AND lower(address) = ? "
                                     f"AND status IN ({', '.join('?' * len(FUNDABLE))})",
                                     (address.lower(), *FUNDABLE)):
        db.execute("UPDATE children SET funded_amount_cents = funded_amount_cents + ? WHERE id = ?", (cents, child_id))
        if status == "wallet_verified" and "funded" in NEXT[status]:
            db.execute("UPDATE children SET status = 'funded' WHERE id = ?", (child_id,))
            insert_event(db, child_id, status, "funded", why, {"cents": cents}, now_ms)

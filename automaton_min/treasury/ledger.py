"""The payment ledger (``payment_intents``): intents are committed with a full sync before signing.

Statuses: ``pending`` (the signature may have left), ``unknown`` (sent, and no success came back), ``settled``,
``expired`` (its window closed, unused on chain), ``rejected`` (older rows only: no longer written). ``pending``
and ``unknown`` rows are open and count as spent (README: Payments).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from automaton_min.chain.eip3009 import TransferAuthorization
from automaton_min.clock import to_iso
from automaton_min.ids import new_ulid

if TYPE_CHECKING:
    from automaton_min.store.db import Database

OPEN = ("pending", "unknown")

_COLUMNS = ("id, nonce, purpose, resource, network, asset, payer, payee, amount_atomic, amount_cents, valid_after, "
            "valid_before, status, detail, tx_hash, created_at")


@dataclass(frozen=True)
class Intent:
    id: str
    nonce: str
    purpose: str
    resource: str
    network: str
    asset: str
    payer: str
    payee: str
    amount_atomic: int
    amount_cents: int
    valid_after: int
    valid_before: int
    status: str
    detail: str
    tx_hash: str | None
    created_at: str

    @classmethod
    def from_row(cls, row: tuple) -> "Intent":
        values = list(row)
        values[8] = int(values[8])
        return cls(*values)


def record_intent(
    db: "Database", *, purpose: str, resource: str, network: str, asset: str,
    authorization: TransferAuthorization, amount_cents: int, now_ms: int,
) -> Intent:
    """Insert the intent to pay. Call it inside ``db.transaction(durable=True)``, before signing."""
    stamp = to_iso(now_ms)
    intent_id = new_ulid(now_ms)
    db.execute(
        f"INSERT INTO payment_intents ({_COLUMNS}, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', '', NULL, ?, ?)",
        (intent_id, "0x" + authorization.nonce.hex(), purpose, resource, network, asset, authorization.sender,
         authorization.recipient, str(authorization.value), amount_cents, authorization.valid_after,
         authorization.valid_before, stamp, stamp),
    )
    return get_intent(db, intent_id)


def get_intent(db: "Database", intent_id: str) -> Intent:
    row = db.query_one(f"SELECT {_COLUMNS} FROM payment_intents WHERE id = ?", (intent_id,))
    if row is None:
        raise KeyError(intent_id)
    return Intent.from_row(row)


def set_outcome(db: "Database", intent_id: str, status: str, now_ms: int, detail: str = "",
                tx_hash: str | None = None) -> None:
    """Record what became of an intent. Call it inside ``db.transaction(durable=True)``."""
    db.execute(
        "UPDATE payment_intents SET status = ?, detail = ?, tx_hash = COALESCE(?, tx_hash), updated_at = ?"
        " WHERE id = ?",
        (status, detail[:500], tx_hash, to_iso(now_ms), intent_id),
    )


def blocking_intents(db: "Database", purpose: str, resource: str, now_s: int) -> list[Intent]:
    """Open intents for this purpose and resource whose authorization could still be settled."""
    rows = db.query(
        f"SELECT {_COLUMNS} FROM payment_intents WHERE purpose = ? AND resource = ? AND status IN {OPEN}"
        " AND valid_before > ?",
        (purpose, resource, now_s),
    )
    return [Intent.from_row(row) for row in rows]


def recent_intents(db: "Database", purpose: str, since_ms: int) -> list[Intent]:
    """Intents for ``purpose`` created since ``since_ms`` that settled or may still settle (not expired or rejected)."""
    rows = db.query(
        f"SELECT {_COLUMNS} FROM payment_intents WHERE purpose = ? AND created_at >= ?"
        " AND status NOT IN ('expired', 'rejected') ORDER BY created_at",
        (purpose, to_iso(since_ms)),
    )
    return [Intent.from_row(row) for row in rows]


def open_intents(db: "Database") -> list[Intent]:
    rows = db.query(f"SELECT {_COLUMNS} FROM payment_intents WHERE status IN {OPEN} ORDER BY created_at")
    return [Intent.from_row(row) for row in rows]


def prune_resolved(db: "Database", older_than_ms: int) -> int:
    """Delete settled, rejected and expired intents created before ``older_than_ms``; open ones are kept."""
    with db.transaction():
        db.execute(
            "DELETE FROM payment_intents WHERE status IN ('settled', 'rejected', 'expired') AND created_at < ?",
            (to_iso(older_than_ms),),
        )
        return db.connection.changes()

"""The payment ledger (new in automaton-min): one row per payment this automaton set out to sign. The EIP-3009 nonce is
unique: the idempotency key that ties a signature to exactly one intent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING



if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

PAYMENT_INTENTS = """
CREATE TABLE IF NOT EXISTS payment_intents (
    id TEXT PRIMARY KEY,
    nonce TEXT NOT NULL UNIQUE,
    purpose TEXT NOT NULL,
    resource TEXT NOT NULL,
    network TEXT NOT NULL,
    asset TEXT NOT NULL,
    payer TEXT NOT NULL,
    payee TEXT NOT NULL,
    amount_atomic TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    valid_after INTEGER NOT NULL,
    valid_before INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'settled', 'rejected', 'unknown', 'expired')),
    detail TEXT NOT NULL DEFAULT '',
    tx_hash TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_payment_intents_resource ON payment_intents(resource, status);
CREATE INDEX IF NOT EXISTS idx_payment_intents_created ON payment_intents(created_at);
"""


def create_payment_intents(db: "Database") -> None:
    db.execute(PAYMENT_INTENTS)

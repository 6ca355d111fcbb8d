"""Tables of the social relay and creator approvals (migration 106; ``sent_messages``, ``crash_count`` 109;
``known_payees``, ``pending_approvals.reason`` 110; ``creator_commands`` 112; README: Social relay).

``inbox_messages.signed_by`` (lowercase; NULL: unsigned) decides authority at claim, against the creator configured
then. ``sent_messages`` is keyed by the turn-and-call id, so a replayed turn does not send again; ``crash_count`` counts
crashes with the message in flight, not tries. Replay keys: ``heartbeat_dedup`` (``social:id:*``, ``social:signed:*``).
``creator_commands``: per payee or approval request, when the last creator command applied to it was signed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from automaton_min.store.sqlite import add_missing_columns

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

SOCIAL_TABLES = """
CREATE TABLE IF NOT EXISTS social_outbound (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sent_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_social_outbound_at ON social_outbound(sent_at);
CREATE TABLE IF NOT EXISTS pending_approvals (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    params TEXT NOT NULL,
    params_hash TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'approved', 'releasing', 'released', 'failed', 'expired', 'rejected')),
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    decided_by_message TEXT,
    decided_at TEXT,
    result TEXT
);
CREATE INDEX IF NOT EXISTS idx_pending_approvals_status ON pending_approvals(status, expires_at);
"""


def create_social_tables(db: "Database") -> None:
    db.execute(SOCIAL_TABLES)
    add_missing_columns(db, "inbox_messages", {"signed_by": "TEXT"})


SENT_MESSAGES = """
CREATE TABLE IF NOT EXISTS sent_messages (
    message_id TEXT PRIMARY KEY,
    turn_id TEXT NOT NULL,
    to_address TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('sending', 'sent', 'failed')),
    relay_id TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_sent_messages_created ON sent_messages(created_at);
"""


def create_sent_messages(db: "Database") -> None:
    db.execute(SENT_MESSAGES)
    add_missing_columns(db, "inbox_messages", {"crash_count": "INTEGER NOT NULL DEFAULT 0"})


KNOWN_PAYEES = """
CREATE TABLE IF NOT EXISTS known_payees (
    address TEXT PRIMARY KEY,
    added_by_message TEXT NOT NULL,
    added_at TEXT NOT NULL
);
"""


def create_known_payees(db: "Database") -> None:
    db.execute(KNOWN_PAYEES)
    add_missing_columns(db, "pending_approvals", {"reason": "TEXT"})



def create_creator_commands(db: "Database") -> None:
    db.execute("CREATE TABLE IF NOT EXISTS creator_commands (subject TEXT PRIMARY KEY, signed_at TEXT NOT NULL,"
               " message_id TEXT NOT NULL)")

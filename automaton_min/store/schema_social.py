"""Tables of the social relay and creator approvals (migration 106).

* ``inbox_messages.signed_by``: the address whose relay signature was verified at intake (lowercase), NULL for a
  message that carried no signature. Authority is decided from it when the loop claims the message, against the
  creator address configured then.
* ``social_outbound``: one row per send attempt, for the rolling-hour limit shared by the daemon and the CLI.
* ``pending_approvals``: transfers held for the creator's signed approval.
* ``sent_messages`` (migration 109): one row per message a turn's ``send_message`` call handed to the relay, keyed
  by the message id derived from the turn and the call, so a turn replayed after a crash does not send it again.
* ``inbox_messages.crash_count`` (migration 109): how many times the process died with the message in flight;
  those attempts are not counted as tries (``retry_count``).
* ``known_payees`` (migration 110): addresses the creator made known payees by a signed ``payee add`` message
  (``treasury.payees``), lowercase; ``pending_approvals.reason`` (migration 110): why the transfer waits.

Replay keys live in the runtime's ``heartbeat_dedup`` (``social:id:*``, ``social:signed:*``) with an expiry.
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

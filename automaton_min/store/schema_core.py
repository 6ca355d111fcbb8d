"""Core tables: identity, kv, turns, tool_calls, inbox_messages, transactions; and failed_turns (ours).

Names are the reference's. Column defaults write the one timestamp format, but the code always passes its own
timestamps (from the injected clock), so rows are right even in tables an older runtime created.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import hashlib

import orjson

from automaton_min.clock import SQL_NOW
from automaton_min.store.sqlite import add_missing_columns, normalize_timestamps

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

CORE_TABLES = f"""
CREATE TABLE IF NOT EXISTS identity (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    updated_at TEXT DEFAULT ({SQL_NOW})
);
CREATE TABLE IF NOT EXISTS turns (
    id TEXT PRIMARY KEY,
    timestamp TEXT NOT NULL,
    state TEXT NOT NULL,
    input TEXT,
    input_source TEXT,
    thinking TEXT NOT NULL,
    tool_calls TEXT NOT NULL DEFAULT '[]',
    token_usage TEXT NOT NULL DEFAULT '{{}}',
    cost_cents INTEGER NOT NULL DEFAULT 0,
    created_at TEXT DEFAULT ({SQL_NOW})
);
CREATE TABLE IF NOT EXISTS tool_calls (
    id TEXT PRIMARY KEY,
    turn_id TEXT NOT NULL REFERENCES turns(id),
    name TEXT NOT NULL,
    arguments TEXT DEFAULT '{{}}',
    result TEXT DEFAULT '',
    duration_ms INTEGER DEFAULT 0,
    error TEXT,
    created_at TEXT DEFAULT ({SQL_NOW})
);
CREATE TABLE IF NOT EXISTS transactions (
    id TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    amount_cents INTEGER,
    balance_after_cents INTEGER,
    description TEXT DEFAULT '',
    created_at TEXT DEFAULT ({SQL_NOW})
);
CREATE TABLE IF NOT EXISTS inbox_messages (
    id TEXT PRIMARY KEY,
    from_address TEXT NOT NULL,
    content TEXT NOT NULL,
    received_at TEXT DEFAULT ({SQL_NOW}),
    processed_at TEXT,
    reply_to TEXT
);
CREATE INDEX IF NOT EXISTS idx_turns_timestamp ON turns(timestamp);
CREATE INDEX IF NOT EXISTS idx_turns_state ON turns(state);
CREATE INDEX IF NOT EXISTS idx_tool_calls_turn ON tool_calls(turn_id);
CREATE INDEX IF NOT EXISTS idx_transactions_type ON transactions(type);
CREATE INDEX IF NOT EXISTS idx_inbox_unprocessed ON inbox_messages(received_at) WHERE processed_at IS NULL;
"""

# Columns the reference added to inbox_messages in its v4; present in every database we hand out.
INBOX_COLUMNS = {
    "to_address": "TEXT",
    "raw_content": "TEXT",
    "status": "TEXT DEFAULT 'received'",
    "retry_count": "INTEGER DEFAULT 0",
    "max_retries": "INTEGER DEFAULT 3",
}

CORE_TIMESTAMPS = {
    "schema_version": ("applied_at",),
    "kv": ("updated_at",),
    "turns": ("timestamp", "created_at"),
    "tool_calls": ("created_at",),
    "transactions": ("created_at",),
    "inbox_messages": ("received_at", "processed_at"),
}


def create_core_tables(db: "Database") -> None:
    db.execute(CORE_TABLES)
    add_missing_columns(db, "inbox_messages", INBOX_COLUMNS)


def normalize_core_timestamps(db: "Database") -> None:
    for table, columns in CORE_TIMESTAMPS.items():
        normalize_timestamps(db, table, columns)


def index_turn_order(db: "Database") -> None:
    """Turns are read newest first by ``(timestamp, id)``; without this index the newest three of 100,000 turns
    cost a scan and a sort of all of them (150 ms) on every turn."""
    db.execute("CREATE INDEX IF NOT EXISTS idx_turns_order ON turns(timestamp, id)")


FAILED_TURNS = """
CREATE TABLE IF NOT EXISTS failed_turns (
    id TEXT PRIMARY KEY,
    turn_id TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    state TEXT NOT NULL,
    input_source TEXT,
    ending TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_failed_turns_order ON failed_turns(timestamp, turn_id, id);
"""


def record_turn_endings(db: "Database") -> None:
    """How each turn ended (``turns.ending``, JSON), and the turns that failed: a failed turn writes nothing of
    itself to ``turns``, so ``logs`` reads it from ``failed_turns``."""
    add_missing_columns(db, "turns", {"ending": "TEXT"})
    db.execute(FAILED_TURNS)


SOUL_HISTORY = f"""
CREATE TABLE IF NOT EXISTS soul_history (
    id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    content TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    change_source TEXT NOT NULL CHECK (change_source IN ('agent', 'human', 'system', 'genesis', 'reflection')),
    change_reason TEXT,
    previous_version_id TEXT REFERENCES soul_history(id),
    approved_by TEXT,
    created_at TEXT NOT NULL DEFAULT ({SQL_NOW})
);
CREATE INDEX IF NOT EXISTS idx_soul_version ON soul_history(version);
"""


def create_soul_history(db: "Database") -> None:
    """Every version of SOUL.md (the reference's v5 table); the one previous soul kept in KV ``soul_previous`` before
    this table becomes its first version."""
    db.execute(SOUL_HISTORY)
    kept = db.scalar("SELECT value FROM kv WHERE key = 'soul_previous'")
    if kept and not db.scalar("SELECT 1 FROM soul_history"):
        old = orjson.loads(kept)
        content = str(old.get("content") or "")
        db.execute("INSERT INTO soul_history (id, version, content, content_hash, change_source, change_reason, "
                   "created_at) VALUES ('soul-previous', 1, ?, ?, 'agent', ?, ?)",
                   (content, hashlib.sha256(content.encode()).hexdigest(), old.get("reason"), old.get("replacedAt")))

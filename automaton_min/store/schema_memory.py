"""The memory tables (migration 107) with the reference's names and columns (its v5, v9, v10), and their FTS5 indexes.

Never ``INSERT OR REPLACE`` into a memory table: a REPLACE deletes without firing the delete trigger (unless
``recursive_triggers`` is on), so the external-content index would keep stale entries; use an UPDATE or an upsert.
A text-keyed table's rowid may change across ``VACUUM``, which nothing here runs: an index would need a rebuild.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from automaton_min.clock import SQL_NOW
from automaton_min.store.sqlite import normalize_timestamps

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

NOW = f"({SQL_NOW})"

MEMORY_TABLES = f"""
CREATE TABLE IF NOT EXISTS working_memory (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    content TEXT NOT NULL,
    content_type TEXT NOT NULL
        CHECK (content_type IN ('goal', 'observation', 'plan', 'reflection', 'task', 'decision', 'note', 'summary')),
    priority REAL NOT NULL DEFAULT 0.5,
    token_count INTEGER NOT NULL DEFAULT 0,
    expires_at TEXT,
    source_turn TEXT,
    created_at TEXT NOT NULL DEFAULT {NOW}
);
CREATE INDEX IF NOT EXISTS idx_wm_session ON working_memory(session_id, priority);

CREATE TABLE IF NOT EXISTS episodic_memory (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    summary TEXT NOT NULL,
    detail TEXT,
    outcome TEXT CHECK (outcome IN ('success', 'failure', 'partial', 'neutral') OR outcome IS NULL),
    importance REAL NOT NULL DEFAULT 0.5,
    embedding_key TEXT,
    token_count INTEGER NOT NULL DEFAULT 0,
    accessed_count INTEGER NOT NULL DEFAULT 0,
    last_accessed_at TEXT,
    classification TEXT NOT NULL DEFAULT 'maintenance'
        CHECK (classification IN ('strategic', 'productive', 'communication', 'maintenance', 'idle', 'error')),
    created_at TEXT NOT NULL DEFAULT {NOW}
);
CREATE INDEX IF NOT EXISTS idx_episodic_type ON episodic_memory(event_type);
CREATE INDEX IF NOT EXISTS idx_episodic_importance ON episodic_memory(importance);
CREATE INDEX IF NOT EXISTS idx_episodic_classification ON episodic_memory(classification);

CREATE TABLE IF NOT EXISTS session_summaries (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL UNIQUE,
    summary TEXT NOT NULL,
    key_decisions TEXT NOT NULL DEFAULT '[]',
    tools_used TEXT NOT NULL DEFAULT '[]',
    outcomes TEXT NOT NULL DEFAULT '[]',
    turn_count INTEGER NOT NULL DEFAULT 0,
    total_tokens INTEGER NOT NULL DEFAULT 0,
    total_cost_cents INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL DEFAULT {NOW}
);

CREATE TABLE IF NOT EXISTS semantic_memory (
    id TEXT PRIMARY KEY,
    category TEXT NOT NULL
        CHECK (category IN ('self', 'environment', 'financial', 'agent', 'domain', 'procedural_ref', 'creator')),
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    confidence REAL NOT NULL DEFAULT 1.0,
    source TEXT NOT NULL,
    embedding_key TEXT,
    last_verified_at TEXT,
    created_at TEXT NOT NULL DEFAULT {NOW},
    updated_at TEXT NOT NULL DEFAULT {NOW},
    UNIQUE (category, key)
);
CREATE INDEX IF NOT EXISTS idx_semantic_category ON semantic_memory(category);

CREATE TABLE IF NOT EXISTS procedural_memory (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    description TEXT NOT NULL,
    steps TEXT NOT NULL,
    success_count INTEGER NOT NULL DEFAULT 0,
    failure_count INTEGER NOT NULL DEFAULT 0,
    last_used_at TEXT,
    created_at TEXT NOT NULL DEFAULT {NOW},
    updated_at TEXT NOT NULL DEFAULT {NOW}
);

CREATE TABLE IF NOT EXISTS relationship_memory (
    id TEXT PRIMARY KEY,
    entity_address TEXT NOT NULL UNIQUE,
    entity_name TEXT,
    relationship_type TEXT NOT NULL,
    trust_score REAL NOT NULL DEFAULT 0.5,
    interaction_count INTEGER NOT NULL DEFAULT 0,
    last_interaction_at TEXT,
    notes TEXT,
    created_at TEXT NOT NULL DEFAULT {NOW},
    updated_at TEXT NOT NULL DEFAULT {NOW}
);
CREATE INDEX IF NOT EXISTS idx_rel_trust ON relationship_memory(trust_score);

CREATE TABLE IF NOT EXISTS event_stream (
    id TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    agent_address TEXT NOT NULL,
    goal_id TEXT,
    task_id TEXT,
    content TEXT NOT NULL,
    token_count INTEGER NOT NULL,
    compacted_to TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_event_stream_agent ON event_stream(agent_address, created_at);
CREATE INDEX IF NOT EXISTS idx_event_stream_goal ON event_stream(goal_id, created_at);
CREATE INDEX IF NOT EXISTS idx_event_stream_type ON event_stream(type, created_at);

CREATE TABLE IF NOT EXISTS knowledge_store (
    id TEXT PRIMARY KEY,
    category TEXT NOT NULL
        CHECK (category IN ('market', 'technical', 'social', 'financial', 'operational')),
    key TEXT NOT NULL,
    content TEXT NOT NULL,
    source TEXT NOT NULL,
    confidence REAL NOT NULL DEFAULT 1.0,
    last_verified TEXT NOT NULL,
    access_count INTEGER NOT NULL DEFAULT 0,
    token_count INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    expires_at TEXT
);
CREATE INDEX IF NOT EXISTS idx_knowledge_category ON knowledge_store(category);
CREATE INDEX IF NOT EXISTS idx_knowledge_key ON knowledge_store(key);
"""

# Each memory store's table and the text columns its FTS5 index covers (in bm25 weight order).
FTS_COLUMNS: dict[str, tuple[str, ...]] = {
    "working_memory": ("content",),
    "episodic_memory": ("event_type", "summary", "detail"),
    "session_summaries": ("summary", "key_decisions"),
    "semantic_memory": ("category", "key", "value"),
    "procedural_memory": ("name", "description", "steps"),
    "relationship_memory": ("entity_address", "entity_name", "relationship_type", "notes"),
}

TOKENIZER = "porter unicode61 remove_diacritics 2"

MEMORY_TIMESTAMPS = {
    "working_memory": ("expires_at", "created_at"),
    "episodic_memory": ("last_accessed_at", "created_at"),
    "session_summaries": ("created_at",),
    "semantic_memory": ("last_verified_at", "created_at", "updated_at"),
    "procedural_memory": ("last_used_at", "created_at", "updated_at"),
    "relationship_memory": ("last_interaction_at", "created_at", "updated_at"),
    "event_stream": ("created_at",),
    "knowledge_store": ("last_verified", "created_at", "expires_at"),
}


def fts_name(table: str) -> str:
    return f"{table}_fts"


def fts_sql(table: str, columns: tuple[str, ...]) -> str:
    """The FTS5 table and its three sync triggers for ``table``."""
    fts = fts_name(table)
    cols = ", ".join(columns)
    new = ", ".join(f"new.{c}" for c in columns)
    old = ", ".join(f"old.{c}" for c in columns)
    return f"""
CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5(
    {cols}, content='{table}', content_rowid='rowid', tokenize='{TOKENIZER}'
);
CREATE TRIGGER IF NOT EXISTS {fts}_ai AFTER INSERT ON {table} BEGIN
    INSERT INTO {fts}(rowid, {cols}) VALUES (new.rowid, {new});
END;
CREATE TRIGGER IF NOT EXISTS {fts}_ad AFTER DELETE ON {table} BEGIN
    INSERT INTO {fts}({fts}, rowid, {cols}) VALUES ('delete', old.rowid, {old});
END;
CREATE TRIGGER IF NOT EXISTS {fts}_au AFTER UPDATE OF {cols} ON {table} BEGIN
    INSERT INTO {fts}({fts}, rowid, {cols}) VALUES ('delete', old.rowid, {old});
    INSERT INTO {fts}(rowid, {cols}) VALUES (new.rowid, {new});
END;
"""


def create_memory_tables(db: "Database") -> None:
    db.execute(MEMORY_TABLES)
    for table, columns in MEMORY_TIMESTAMPS.items():  # rows a reference runtime left
        normalize_timestamps(db, table, columns)
    for table, columns in FTS_COLUMNS.items():
        db.execute(fts_sql(table, columns))
        fts = fts_name(table)
        db.execute(f"INSERT INTO {fts}({fts}) VALUES ('rebuild')")  # index the rows already there

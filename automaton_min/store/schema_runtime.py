"""The long-running runtime's tables with the reference's names and columns (its v4 and v8; their rows are kept): the
heartbeat's schedule and history, wake events, de-duplication keys, metric snapshots. Timestamps are the one ISO
format, so text order is time order (the reference compared ISO with SQLite's ``datetime('now')`` and never saw a
lease expire within the day).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from automaton_min.clock import SQL_NOW
from automaton_min.store.sqlite import normalize_timestamps

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

RUNTIME_TABLES = f"""
CREATE TABLE IF NOT EXISTS heartbeat_schedule (
    task_name TEXT PRIMARY KEY,
    cron_expression TEXT NOT NULL,
    interval_ms INTEGER,
    enabled INTEGER DEFAULT 1,
    priority INTEGER DEFAULT 0,
    timeout_ms INTEGER DEFAULT 30000,
    max_retries INTEGER DEFAULT 1,
    tier_minimum TEXT DEFAULT 'dead' CHECK (tier_minimum IN ('dead', 'critical', 'low_compute', 'normal', 'high')),
    last_run_at TEXT,
    next_run_at TEXT,
    last_result TEXT CHECK (last_result IN ('success', 'failure', 'timeout', 'skipped') OR last_result IS NULL),
    last_error TEXT,
    run_count INTEGER DEFAULT 0,
    fail_count INTEGER DEFAULT 0,
    lease_owner TEXT,
    lease_expires_at TEXT,
    created_at TEXT DEFAULT ({SQL_NOW}),
    updated_at TEXT DEFAULT ({SQL_NOW})
);
CREATE TABLE IF NOT EXISTS heartbeat_history (
    id TEXT PRIMARY KEY,
    task_name TEXT NOT NULL REFERENCES heartbeat_schedule(task_name),
    started_at TEXT NOT NULL,
    completed_at TEXT,
    result TEXT CHECK (result IN ('success', 'failure', 'timeout', 'skipped')),
    duration_ms INTEGER,
    error TEXT,
    idempotency_key TEXT UNIQUE,
    created_at TEXT DEFAULT ({SQL_NOW})
);
CREATE INDEX IF NOT EXISTS idx_hb_history_task ON heartbeat_history(task_name, started_at);
CREATE TABLE IF NOT EXISTS wake_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source TEXT NOT NULL,
    reason TEXT NOT NULL,
    payload TEXT DEFAULT '{{}}',
    consumed_at TEXT,
    created_at TEXT DEFAULT ({SQL_NOW})
);
CREATE INDEX IF NOT EXISTS idx_wake_unconsumed ON wake_events(created_at) WHERE consumed_at IS NULL;
CREATE TABLE IF NOT EXISTS heartbeat_dedup (
    dedup_key TEXT PRIMARY KEY,
    task_name TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    created_at TEXT DEFAULT ({SQL_NOW})
);
CREATE INDEX IF NOT EXISTS idx_dedup_expires ON heartbeat_dedup(expires_at);
CREATE TABLE IF NOT EXISTS metric_snapshots (
    id TEXT PRIMARY KEY,
    snapshot_at TEXT NOT NULL,
    metrics_json TEXT DEFAULT '[]',
    alerts_json TEXT DEFAULT '[]',
    created_at TEXT DEFAULT ({SQL_NOW})
);
CREATE INDEX IF NOT EXISTS idx_metric_snapshots_at ON metric_snapshots(snapshot_at);
"""


RUNTIME_TIMESTAMPS = {
    "heartbeat_schedule": ("last_run_at", "next_run_at", "lease_expires_at", "created_at", "updated_at"),
    "heartbeat_history": ("started_at", "completed_at", "created_at"),
    "wake_events": ("consumed_at", "created_at"),
    "heartbeat_dedup": ("expires_at", "created_at"),
    "metric_snapshots": ("snapshot_at", "created_at"),
}


def create_runtime_tables(db: "Database") -> None:
    db.execute(RUNTIME_TABLES)
    for table, columns in RUNTIME_TIMESTAMPS.items():  # rows a reference runtime left
        normalize_timestamps(db, table, columns)

"""Inference and spending tables, with the reference's names and columns: model_registry,
inference_costs, spend_tracking."""

from __future__ import annotations

from typing import TYPE_CHECKING

from automaton_min.store.sqlite import normalize_timestamps

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

INFERENCE_TABLES = """
CREATE TABLE IF NOT EXISTS model_registry (
    model_id TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    display_name TEXT NOT NULL,
    tier_minimum TEXT NOT NULL DEFAULT 'normal',
    cost_per_1k_input INTEGER NOT NULL DEFAULT 0,
    cost_per_1k_output INTEGER NOT NULL DEFAULT 0,
    max_tokens INTEGER NOT NULL DEFAULT 4096,
    context_window INTEGER NOT NULL DEFAULT 128000,
    supports_tools INTEGER NOT NULL DEFAULT 1,
    supports_vision INTEGER NOT NULL DEFAULT 0,
    parameter_style TEXT NOT NULL DEFAULT 'max_tokens'
        CHECK (parameter_style IN ('max_tokens', 'max_completion_tokens')),
    enabled INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS inference_costs (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    turn_id TEXT,
    model TEXT NOT NULL,
    provider TEXT NOT NULL,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_cents INTEGER NOT NULL DEFAULT 0,
    latency_ms INTEGER NOT NULL DEFAULT 0,
    tier TEXT NOT NULL,
    task_type TEXT NOT NULL
        CHECK (task_type IN ('agent_turn', 'heartbeat_triage', 'safety_check', 'summarization', 'planning')),
    cache_hit INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_inference_session ON inference_costs(session_id);
CREATE INDEX IF NOT EXISTS idx_inference_model ON inference_costs(model);
CREATE INDEX IF NOT EXISTS idx_inference_created ON inference_costs(created_at);
CREATE INDEX IF NOT EXISTS idx_inference_task_type ON inference_costs(task_type);
CREATE TABLE IF NOT EXISTS spend_tracking (
    id TEXT PRIMARY KEY,
    tool_name TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    recipient TEXT,
    domain TEXT,
    category TEXT NOT NULL CHECK (category IN ('transfer', 'x402', 'inference', 'other')),
    window_hour TEXT NOT NULL,
    window_day TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_spend_hour ON spend_tracking(category, window_hour);
CREATE INDEX IF NOT EXISTS idx_spend_day ON spend_tracking(category, window_day);
CREATE INDEX IF NOT EXISTS idx_spend_created ON spend_tracking(category, created_at);
"""


def create_inference_tables(db: "Database") -> None:
    db.execute(INFERENCE_TABLES)
    normalize_timestamps(db, "model_registry", ("created_at", "updated_at"))
    normalize_timestamps(db, "inference_costs", ("created_at",))
    normalize_timestamps(db, "spend_tracking", ("created_at",))

"""The policy engine's audit table, ``policy_decisions``, with the reference's name and columns (its v4; rows kept).
New rows carry the real turn id and the one timestamp format.
"""

from __future__ import annotations

from typing import TYPE_CHECKING



if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

POLICY_DECISIONS = """
CREATE TABLE IF NOT EXISTS policy_decisions (
    id TEXT PRIMARY KEY,
    turn_id TEXT,
    tool_name TEXT NOT NULL,
    tool_args_hash TEXT NOT NULL,
    risk_level TEXT NOT NULL CHECK (risk_level IN ('safe', 'caution', 'dangerous', 'forbidden')),
    decision TEXT NOT NULL CHECK (decision IN ('allow', 'deny', 'quarantine')),
    rules_evaluated TEXT NOT NULL DEFAULT '[]',
    rules_triggered TEXT NOT NULL DEFAULT '[]',
    reason TEXT NOT NULL DEFAULT '',
    latency_ms INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_policy_decisions_turn ON policy_decisions(turn_id);
CREATE INDEX IF NOT EXISTS idx_policy_decisions_tool ON policy_decisions(tool_name);
CREATE INDEX IF NOT EXISTS idx_policy_decisions_decision ON policy_decisions(decision);
"""


def create_policy_decisions(db: "Database") -> None:
    db.execute(POLICY_DECISIONS)

"""The policy engine: rules that every tool call passes before it runs, and the record of every decision.

``PolicyEngine(default_rules(), db=..., config=..., home=..., workspace=..., now=...)``;
``engine.evaluate(PolicyRequest(...))`` gives a ``PolicyDecision``; ``engine.authorize``
is the agent loop's hook (``None`` = run it, else the refusal). Rule families, in
the order they run: validation (100), path protection (200), command safety
(300), authority (400), financial (500), rate limits (600).
"""

from __future__ import annotations

from automaton_min.agent.policy.engine import (
    ALLOWED,
    DB_UNAVAILABLE,
    RULE_ERROR,
    Applies,
    PolicyDecision,
    PolicyEngine,
    PolicyEnv,
    PolicyRequest,
    Rule,
    Verdict,
    args_hash,
    canonical_json,
    default_rules,
    deny,
    every_tool,
    quarantine,
    tools,
)

__all__ = [
    "ALLOWED", "DB_UNAVAILABLE", "RULE_ERROR", "Applies", "PolicyDecision", "PolicyEngine", "PolicyEnv", "PolicyRequest",
    "Rule", "Verdict", "args_hash", "canonical_json", "default_rules", "deny", "every_tool", "quarantine", "tools",
]

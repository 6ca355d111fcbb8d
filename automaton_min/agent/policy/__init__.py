"""The policy engine: rules that every tool call passes before it runs, and the record of every decision.

``PolicyEngine(default_rules(), db=..., config=..., home=..., workspace=..., now=...)``; ``engine.evaluate``
gives a ``PolicyDecision``; ``engine.authorize`` is the agent loop's hook (``None`` = run it, else the refusal).
Rule families, in the order they run: validation (100), path protection (200), commands where the kernel does not
confine them (300), authority (400), financial (500), rate limits (600). The shared types are in ``types.py``.
"""

from __future__ import annotations

from automaton_min.agent.policy.engine import PolicyEngine, args_hash, canonical_json, default_rules
from automaton_min.agent.policy.types import (
    ALLOWED,
    DB_UNAVAILABLE,
    RULE_ERROR,
    Applies,
    PolicyDecision,
    PolicyEnv,
    PolicyRequest,
    Rule,
    Verdict,
    deny,
    every_tool,
    quarantine,
    tools,
)

__all__ = [
    "ALLOWED", "DB_UNAVAILABLE", "RULE_ERROR", "Applies", "PolicyDecision", "PolicyEngine", "PolicyEnv",
    "PolicyRequest", "Rule", "Verdict", "args_hash", "canonical_json", "default_rules", "deny", "every_tool",
    "quarantine", "tools",
]

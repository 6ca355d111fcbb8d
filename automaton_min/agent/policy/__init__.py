"""The policy engine (README: The agent, Policy): ``PolicyEngine``, ``default_rules`` and the types the rules share."""

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

"""The policy engine (README: The agent, Policy); the rules' shared types are in ``types.py``."""

from automaton_min.agent.policy.engine import PolicyEngine, default_rules

__all__ = ["PolicyEngine", "default_rules"]

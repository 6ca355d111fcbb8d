"""The agent's lifecycle states, stored in KV ``agent_state``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from automaton_min.store.kv import get_value

if TYPE_CHECKING:
    from automaton_min.store.db import Database

AGENT_STATES = ("setup", "waking", "running", "sleeping", "low_compute", "critical", "dead")
STATE_KEY = "agent_state"


def read_agent_state(db: "Database") -> str:
    """The stored state; anything missing or unknown reads as ``setup``."""
    value = get_value(db, STATE_KEY)
    return value if value in AGENT_STATES else "setup"

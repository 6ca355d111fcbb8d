"""The agent's lifecycle states, stored in KV ``agent_state``, and the one table of allowed moves.

Nothing moves back to ``setup``. ``dead`` is sticky: every move out of it but a funded wake is refused, so a new wake
cycle cannot overwrite it (the reference's did); the runtime waits while ``dead`` until funding arrives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from automaton_min.log import get_logger
from automaton_min.store.kv import get_value, set_value

if TYPE_CHECKING:
    from automaton_min.store.db import Database

AGENT_STATES = ("setup", "waking", "running", "sleeping", "low_compute", "critical", "dead")
STATE_KEY = "agent_state"

# States in which the agent takes turns: the survival tier decides among them.
AWAKE_STATES = ("running", "low_compute", "critical")

TRANSITIONS: dict[str, frozenset[str]] = {
    "setup": frozenset({"waking"}),
    "waking": frozenset({"running", "low_compute", "critical", "dead", "sleeping"}),
    "running": frozenset({"low_compute", "critical", "dead", "sleeping", "waking"}),
    "low_compute": frozenset({"running", "critical", "dead", "sleeping", "waking"}),
    "critical": frozenset({"running", "low_compute", "dead", "sleeping", "waking"}),
    "sleeping": frozenset({"waking", "dead"}),
    "dead": frozenset({"waking"}),
}
# Moves that need the caller to state that funding arrived (confirmed positive credits).
FUNDED_ONLY = frozenset({("dead", "waking")})

log = get_logger(__name__)


class InvalidTransition(ValueError):
    """A state change the transition table does not allow (a bug in the caller, never user input)."""

    def __init__(self, current: str, new: str, *, funded: bool = False) -> None:
        hint = " without funding" if (current, new) in FUNDED_ONLY and not funded else ""
        super().__init__(f"agent state cannot move from {current} to {new}{hint}")
        self.current = current
        self.new = new


def can_transition(current: str, new: str, *, funded: bool = False) -> bool:
    """True when the agent may move from ``current`` to ``new`` (staying put is always allowed)."""
    if current not in TRANSITIONS or new not in TRANSITIONS:
        return False
    if current == new:
        return True
    if new not in TRANSITIONS[current]:
        return False
    return funded or (current, new) not in FUNDED_ONLY


def read_agent_state(db: "Database") -> str:
    """The stored state; anything missing or unknown reads as ``setup``."""
    value = get_value(db, STATE_KEY)
    return value if value in AGENT_STATES else "setup"


def set_agent_state(db: "Database", new: str, now_ms: int, *, reason: str, funded: bool = False) -> bool:
    """Move to ``new``; True when the stored state changed (written only then: SD cards wear); ``InvalidTransition``
    for a move the table refuses. Leaving ``dead`` needs ``funded`` (``SurvivalAssessment.funding_arrived``)."""
    if new not in AGENT_STATES:
        raise InvalidTransition(read_agent_state(db), new)
    if read_agent_state(db) == new:  # the common case (every turn): no lock, no write
        return False
    with db.transaction():
        current = read_agent_state(db)
        if current == new:
            return False
        if not can_transition(current, new, funded=funded):
            raise InvalidTransition(current, new, funded=funded)
        set_value(db, STATE_KEY, new, now_ms)
    log.info("agent state", extra={"from": current, "to": new, "reason": reason})
    return True

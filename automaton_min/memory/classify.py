"""Turn classification (README: Memory): the reference's ``classifyTurn`` on this project's tools; first match wins.

A turn whose calls all failed is ``error``; one that also did something is classed by that (its outcome ``partial``);
a turn that read an inbox message and did nothing more telling (text, a sleep, status checks) is ``communication``
(the reference called it idle or maintenance and forgot what it read).
"""

from __future__ import annotations

import re

from automaton_min.store.turns import StoredTurn

STRATEGIC_TOOLS = frozenset({"update_soul", "update_genesis_prompt", "modify_heartbeat", "transfer_credits",
                             "spawn_child", "fund_child"})
COMMUNICATION_TOOLS = frozenset({"send_message", "note_about_agent", "distress_signal", "message_child"})
PRODUCTIVE_TOOLS = frozenset({
    "exec", "stop_job", "write_file", "read_file", "expose_port", "remove_port", "create_sandbox", "x402_fetch",
    "topup_credits", "start_child", "verify_child_constitution", "prune_dead_children",
    "save_procedure", "set_goal", "complete_goal", "remember_fact",
})
MAINTENANCE_TOOLS = frozenset({
    "check_credits", "check_usdc_balance", "check_inference_spending", "system_synopsis", "heartbeat_ping",
    "list_sandboxes", "list_models", "switch_model", "view_soul", "sleep", "enter_low_compute",
    "recall_facts", "recall_procedure", "review_memory", "forget", "list_children", "check_child_status",
})
MESSAGE_SOURCES = frozenset({"inbox"})
SIGNIFICANT = frozenset({"strategic", "productive", "communication", "error"})
_ERROR_WORDS = re.compile(r"error|failed|exception|blocked|denied")


def classify_turn(turn: StoredTurn) -> str:
    """The class of ``turn``: strategic, productive, communication, maintenance, error or idle."""
    calls = turn.tool_calls
    if calls and all(c.error for c in calls):
        return "error"
    if not calls and _ERROR_WORDS.search((turn.thinking or "").lower()):
        return "error"
    names = {c.name for c in calls if not c.error}
    for tools, label in ((STRATEGIC_TOOLS, "strategic"), (COMMUNICATION_TOOLS, "communication"),
                         (PRODUCTIVE_TOOLS, "productive")):
        if names & tools:
            return label
    if turn.input and turn.input_source in MESSAGE_SOURCES:  # what a message said is kept, however it was answered
        return "communication"
    if names & MAINTENANCE_TOOLS:
        return "maintenance"
    if not calls and not turn.input:
        return "idle"
    return "maintenance"


def is_significant(classification: str) -> bool:
    """Whether a turn of this class is worth an episodic entry."""
    return classification in SIGNIFICANT

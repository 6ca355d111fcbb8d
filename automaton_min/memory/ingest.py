"""Ingestion after every committed turn (README: Memory): classify it, keep significant turns as episodes, count
message senders in relationship memory, clear expired working memory. A store's refusal skips only its own step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from automaton_min.clock import Clock
from automaton_min.memory.classify import classify_turn, is_significant
from automaton_min.memory.common import AGENT_SESSION, MemoryStoreError
from automaton_min.memory.stores import EpisodicMemory, RelationshipMemory, WorkingMemory
from automaton_min.log import get_logger
from automaton_min.store.turns import StoredTurn

if TYPE_CHECKING:
    from automaton_min.store.db import Database

log = get_logger(__name__)

IMPORTANCE = {"strategic": 0.9, "error": 0.8, "productive": 0.7, "communication": 0.6, "maintenance": 0.3,
              "idle": 0.1}
CREATOR_IMPORTANCE, OUTSIDE_IMPORTANCE = 1.0, 0.3  # a turn on the creator's signed word, or on outsiders' words
INPUT_CUT, THOUGHT_CUT, RESULT_CUT, DETAIL_CUT = 1_500, 300, 120, 4_000


def _cut(value: str | None, limit: int) -> str:
    value = " ".join((value or "").split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _outcome(turn: StoredTurn) -> str:
    failed = sum(1 for c in turn.tool_calls if c.error)
    if not turn.tool_calls:
        return "neutral"
    return "success" if not failed else "failure" if failed == len(turn.tool_calls) else "partial"


CREATOR_ORIGIN = "from your creator (signed)"
OUTSIDE_ORIGIN = "from outside ("
ANSWERING_OUTSIDERS = "In answer to outsiders (not your creator's signed word):"  # an external turn without a message


def message_origin(senders: Sequence[str], from_creator: bool) -> str:
    """Whose words a turn's messages were, as its episode says it: the creator only when every one of them carried
    the creator's verified signature; anyone else is an outsider, whatever address they claim."""
    if from_creator:
        return CREATOR_ORIGIN
    return f"{OUTSIDE_ORIGIN}{', '.join(dict.fromkeys(senders))}; not your creator's signed word)"


def episode_text(turn: StoredTurn, senders: Sequence[str], from_creator: bool = False) -> tuple[str, str | None]:
    """The summary (said and done, cut) and the detail (longer results) of a turn's episode."""
    lines = [ANSWERING_OUTSIDERS] if turn.external and not senders else []
    if turn.input:
        origin = message_origin(senders, from_creator) if senders else f"({turn.input_source or 'input'})"
        lines.append(f"Message {origin}: {_cut(turn.input, INPUT_CUT)}")
    if turn.tool_calls:
        lines.append("Tools: " + "; ".join(
            f"{c.name}(FAILED: {_cut(c.error, RESULT_CUT)})" if c.error
            else f"{c.name}(ok: {_cut(c.result, RESULT_CUT)})" for c in turn.tool_calls))
    if turn.thinking:
        lines.append("Said: " + _cut(turn.thinking, THOUGHT_CUT))
    detail = "\n".join(f"{c.name}: {_cut(c.error or c.result, 800)}" for c in turn.tool_calls)
    return "\n".join(lines) or "No activity", _cut(detail, DETAIL_CUT) or None


def _step(name: str, turn: StoredTurn, action: Callable[[], object]) -> None:
    try:
        action()  # the stores check values before they write
    except MemoryStoreError as exc:  # a value a store refuses: this step is skipped, the turn stands
        log.warning("memory ingestion step skipped", extra={"step": name, "turn": turn.id, "error": str(exc)})


def ingest_turn(db: "Database", turn: StoredTurn, now: Clock, *, source: str | None = None,
                sender: str | Sequence[str] | None = None, creator: str | None = None,
                signers: Sequence[str] = ()) -> str:
    """Ingest a committed turn; returns its classification. ``source`` defaults to the turn's input source;
    ``sender`` is the address (or addresses) of the inbox messages it read; ``creator`` is the creator's address
    when one of them carried the creator's verified signature (its entry is then the creator's, trust 1);
    ``signers`` the senders whose signature was verified (only such a sender is recorded as a child)."""
    source = source if source is not None else turn.input_source
    senders = [sender] if isinstance(sender, str) else list(sender or ())
    senders = senders if source == "inbox" else []
    classification = classify_turn(turn)
    from_creator = bool(creator and senders and len(signers) == len(senders) and not turn.external
                        and all(signer.lower() == creator.lower() for signer in signers))  # its context held no
    # outsider's words: a turn of a cycle that read one answers to outsiders, whoever wrote its own messages

    def record_episode() -> None:
        summary, detail = episode_text(turn, senders, from_creator)
        event_type = f"tool:{turn.tool_calls[0].name}" if turn.tool_calls else "message" if turn.input else "thinking"
        importance = (CREATOR_IMPORTANCE if from_creator else min(IMPORTANCE[classification], OUTSIDE_IMPORTANCE)
                      if senders else IMPORTANCE[classification])  # outsiders' words rank below the creator's
        EpisodicMemory(db, now).record(AGENT_SESSION, event_type, summary, detail=detail, outcome=_outcome(turn),
                                       importance=importance, classification=classification)

    def record_contacts() -> None:
        from automaton_min.store.children import get_child, names_by_address

        people = RelationshipMemory(db, now)
        if creator and creator.lower() in (a.lower() for a in senders) and people.get(creator) is None:
            people.record(creator, relationship_type="creator", trust=1.0)
        children = names_by_address(db)
        for address in dict.fromkeys(senders):
            signed = address.lower() in {signer.lower() for signer in signers}
            if signed and address.lower() in children and getattr(people.get(address), "relationship_type",
                                                                   None) != "child":
                people.record(address, relationship_type="child", name=children[address.lower()])
            people.record_interaction(address, default_type="messaged_us")
        for call in turn.tool_calls:
            if call.name == "send_message" and not call.error and isinstance(call.arguments.get("to_address"), str):
                to = call.arguments["to_address"]
                people.record_interaction(to, default_type="child" if to.lower() in children else "contacted")
            elif call.name == "message_child" and not call.error:
                child = get_child(db, str(call.arguments.get("child_id")))
                if child is not None and child.address:
                    people.record_interaction(child.address, default_type="child")

    with db.transaction():  # one commit for the episode and the contacts
        if is_significant(classification):
            _step("episode", turn, record_episode)
        _step("relationships", turn, record_contacts)
    _step("working", turn, WorkingMemory(db, now).clear_expired)  # its own batched transactions
    return classification

"""Compression (README: Memory): compact references for turns and events, and folding old turns into the summary.

The summary and the fold marker move in one transaction; the turns stay in ``turns``, only the context stops
showing them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import orjson

from automaton_min.memory.common import AGENT_SESSION
from automaton_min.memory.stores import SessionSummaries
from automaton_min.store.kv import get_value, set_value
from automaton_min.store.turns import StoredTurn

if TYPE_CHECKING:
    from automaton_min.clock import Clock
    from automaton_min.store.wake import WakeEvent
    from automaton_min.store.db import Database

FOLD_MARKER_KEY = "context_folded_through"
REFERENCE_CONTENT = 96
SUMMARY_CHARS = 6_000
TRANSCRIPT_INPUT, TRANSCRIPT_RESULT, TRANSCRIPT_SAID = 600, 200, 300


@dataclass(frozen=True)
class CompactReference:
    id: str
    type: str
    created_at: str
    reference: str
    original_tokens: int
    compacted_tokens: int


@dataclass(frozen=True)
class Compacted:
    references: tuple[CompactReference, ...]

    @property
    def original_tokens(self) -> int:
        return sum(r.original_tokens for r in self.references)

    @property
    def compacted_tokens(self) -> int:
        return sum(r.compacted_tokens for r in self.references)

    @property
    def ratio(self) -> float:
        """Compacted over original tokens (1.0 when there was nothing)."""
        return self.compacted_tokens / self.original_tokens if self.original_tokens else 1.0


def _flat(text: str | None) -> str:
    return " ".join((text or "").split())


def reference_line(item_id: str, item_type: str, created_at: str, content: str, *, goal: str | None = None,
                   task: str | None = None) -> str:
    """One compact reference in the seed's format."""
    content = _flat(content)
    shown = content if len(content) <= REFERENCE_CONTENT else content[:REFERENCE_CONTENT] + "..."
    return (f"id={item_id} | type={item_type} | createdAt={created_at} | goal={goal or '-'} | task={task or '-'}"
            f" | content={shown}")


def turn_text(turn: StoredTurn) -> str:
    """A turn as plain text: what came in, what the agent said, each tool call and its result."""
    parts = []
    if turn.input:
        parts.append(f"[{turn.input_source or 'input'}] {turn.input}")
    if turn.thinking:
        parts.append(turn.thinking)
    for call in turn.tool_calls:
        parts.append(f"{call.name}({orjson.dumps(call.arguments).decode()}) -> {call.error or call.result}")
    return "\n".join(parts)


OUTSIDERS_REFERENCE = "(a turn that answered outsiders)"  # what stands for such a turn where the agent's own work reads
OUTSIDERS_TURN = ("(a turn that answered outsiders: their words and what it did for them are kept out of your own "
                  "work; they show when you answer outsiders again)")


def turn_reference(turn: StoredTurn, count: Callable[[str], int]) -> CompactReference:
    """The compact reference of a turn; its content leads with what the turn did."""
    tools = ",".join(dict.fromkeys(c.name for c in turn.tool_calls))
    failed = any(c.error for c in turn.tool_calls)
    kind = f"turn:{tools}" if tools else "turn"
    said = " ".join(filter(None, [f"[{turn.input_source or 'input'}] {_flat(turn.input)}" if turn.input else "",
                                  _flat(turn.thinking), "(a tool failed)" if failed else ""]))
    if turn.external:  # a reference may be folded into the summary every later turn reads: no outsider's words
        said = OUTSIDERS_REFERENCE
    line = reference_line(turn.id, kind, turn.timestamp, said or "(no text)")
    return CompactReference(turn.id, kind, turn.timestamp, line, count(turn_text(turn)), count(line))


def wake_reference(event: "WakeEvent", count: Callable[[str], int]) -> CompactReference:
    line = reference_line(str(event.id), f"wake:{event.source}", event.created_at, event.reason)
    return CompactReference(str(event.id), f"wake:{event.source}", event.created_at, line, count(event.reason),
                            count(line))


def compact(references: Sequence[CompactReference]) -> Compacted:
    return Compacted(tuple(references))


class Summarizer(Protocol):
    def summarize(self, previous: str | None, transcript: str) -> str | None:
        """A new summary of ``previous`` plus ``transcript``, or ``None`` when no model could make one."""


@dataclass(frozen=True)
class FoldResult:
    turns: int
    original_tokens: int
    summary_tokens: int
    used_model: bool

    @property
    def ratio(self) -> float:
        return self.summary_tokens / self.original_tokens if self.original_tokens else 1.0


def folded_through(db: "Database") -> tuple[str, str] | None:
    """The ``(timestamp, id)`` of the last turn folded into the summary, or ``None``."""
    raw = get_value(db, FOLD_MARKER_KEY)
    if not raw:
        return None
    try:
        marker = orjson.loads(raw)
        return str(marker["timestamp"]), str(marker["id"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None


def folded_at(db: "Database") -> int | None:
    """When the last fold happened (epoch ms): the history's layout was rebuilt then; ``None`` before any."""
    raw = get_value(db, FOLD_MARKER_KEY)
    try:
        at = orjson.loads(raw).get("at") if raw else None
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return at if type(at) is int else None


def transcript(turns: Sequence[StoredTurn]) -> str:
    """The folded turns as the summarizer reads them, each part cut short."""
    def cut(text: str | None, limit: int) -> str:
        text = _flat(text)
        return text if len(text) <= limit else text[:limit] + "…"

    blocks = []
    for turn in turns:
        lines = [f"## {turn.timestamp}"]
        if turn.external:  # the summary is the agent's own: outsiders' words stay in their labelled episodes
            blocks.append("\n".join([*lines, OUTSIDERS_TURN]))
            continue
        if turn.input:
            lines.append(f"input ({turn.input_source or 'input'}): {cut(turn.input, TRANSCRIPT_INPUT)}")
        if turn.thinking:
            lines.append(f"agent said: {cut(turn.thinking, TRANSCRIPT_SAID)}")
        for call in turn.tool_calls:
            outcome = (f"FAILED {cut(call.error, TRANSCRIPT_RESULT)}" if call.error
                       else cut(call.result, TRANSCRIPT_RESULT))
            lines.append(f"tool {call.name}: {outcome}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _bounded_summary(text: str) -> str:
    text = text.strip()
    return text if len(text) <= SUMMARY_CHARS else "…" + text[-(SUMMARY_CHARS - 1):]


@dataclass
class HistoryFolder:
    """Folds turns into the agent session's summary and moves the fold marker."""

    db: "Database"
    now: "Clock"
    session_id: str = AGENT_SESSION

    def summary(self) -> str | None:
        found = SessionSummaries(self.db, self.now).get(self.session_id)
        return found.summary if found else None

    def fold(self, turns: Sequence[StoredTurn], *, count: Callable[[str], int],
             summarizer: Summarizer | None = None) -> FoldResult:
        """Fold ``turns`` (oldest first, the oldest not yet folded) into the summary; with no ``summarizer``,
        or when it gives nothing, the summary is the old one plus the turns' compact references."""
        if not turns:
            return FoldResult(0, 0, 0, False)
        store = SessionSummaries(self.db, self.now)
        previous = store.get(self.session_id)
        old_text = previous.summary if previous else None
        made = summarizer.summarize(old_text, transcript(turns)) if summarizer is not None else None
        references = [turn_reference(t, count) for t in turns]
        if made and made.strip():
            text = _bounded_summary(made)
        else:
            lines = [old_text.strip()] if old_text else []
            lines.append("Earlier turns (compact references):")
            lines += [r.reference for r in references]
            text = _bounded_summary("\n".join(lines))
        original = sum(r.original_tokens for r in references)
        last = turns[-1]
        with self.db.transaction():
            store.save(self.session_id, text, turn_count=(previous.turn_count if previous else 0) + len(turns),
                               total_tokens=(previous.total_tokens if previous else 0) + original)
            set_value(self.db, FOLD_MARKER_KEY, orjson.dumps({"timestamp": last.timestamp, "id": last.id,
                                                             "at": self.now()}).decode(), self.now())
        return FoldResult(len(turns), original, count(text), bool(made and made.strip()))

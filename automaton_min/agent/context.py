"""The context manager's assembly (README: Memory): a turn's messages within the prompt's capacity, by priority.

An item is left out only when everything above it is in; ``compress`` is also recommended when more turns are
unfolded than were loaded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from automaton_min.inference.router import COUNT_BAND, tools_text
from automaton_min.inference.types import Message, ToolCall, ToolSchema
from automaton_min.memory.compression import CompactReference, Compacted, turn_reference
from automaton_min.memory.retrieval import MemoryRetriever, Retrieved
from automaton_min.memory.tokens import TokenCounter, default_counter, estimate_tokens
from automaton_min.store.turns import StoredTurn

RECENT_ALWAYS = 3
RESULT_LIMIT = 10_000
RESULT_STEPS = (RESULT_LIMIT, 4_000, 2_000, 1_000, 500, 200, 80)
PENDING_SHARE = 0.5
MEMORY_SHARE = 0.4
MEMORY_FLOOR_SHARE = 0.10
SUMMARY_SHARE = 0.15
HEADROOM_SHARE = 0.10
MAX_REFERENCES = 20
MESSAGE_OVERHEAD = 4
RUNTIME_HEADER = "[runtime] The runtime's notes for this turn (not a message from anyone):"
SECTION_JOIN = "\n\n"


@dataclass(frozen=True)
class ContextParts:
    """Everything a turn's context may hold; the turn context builder gathers it."""

    system: str
    tools: tuple[ToolSchema, ...] = ()
    turns: Sequence[StoredTurn] = ()          # not folded yet, oldest first
    more_turns: bool = False                  # unfolded turns older than ``turns`` exist
    pending: Message | None = None
    status: str = ""
    goals: Sequence[str] = ()
    summary: str | None = None
    events: Sequence[CompactReference] = ()   # newest first
    query: str = ""                           # what retrieval searches for
    notes: Sequence[str] = ()                 # one-off runtime notes (the creator's first message)
    outsiders: bool = True                    # False: outsiders' words stay out (a turn of the agent's own)


@dataclass(frozen=True)
class Utilization:
    window: int
    capacity: int
    used: int
    demand: int
    turns_in_context: int
    turns_omitted: int
    compressed_turns: int
    compression_ratio: float
    headroom: int
    memory_tokens: int
    exact: bool
    recommendation: str  # ok | compress | emergency

    @property
    def percent(self) -> float:
        return min(100.0, round(self.used * 100 / self.capacity, 2)) if self.capacity > 0 else 100.0


@dataclass(frozen=True)
class AssembledContext:
    messages: tuple[Message, ...]
    utilization: Utilization
    shown_turns: tuple[str, ...] = ()
    memories: Retrieved = field(default_factory=Retrieved)


# --------------------------------------------------------------------------- sizing


def _exact(counter: TokenCounter) -> Callable[[str], int]:
    """``counter.count``; when the exact encoder cannot load, the estimate raised by its error bound."""
    def count(text: str) -> int:
        n = counter.count(text)
        return n if counter.loaded or not text else math.ceil(n / (1 - COUNT_BAND))
    return count


def message_size(message: Message, count: Callable[[str], int]) -> int:
    total = count(message.content) + MESSAGE_OVERHEAD
    for call in message.tool_calls:
        total += count(call.name) + count(str(call.arguments))
    return total


def size_of(messages: Sequence[Message], count: Callable[[str], int]) -> int:
    return sum(message_size(m, count) for m in messages)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[truncated: {len(text) - limit} characters omitted]"


def _cut_to_tokens(text: str, tokens: int, count: Callable[[str], int]) -> str:
    """``text`` cut (keeping its start) to at most ``tokens``; deterministic, so a stable input stays stable."""
    if count(text) <= tokens:
        return text
    chars = max(0, tokens * 3)
    while chars > 0 and count(_cut(text, chars)) > tokens:
        chars = chars * 3 // 4
    return _cut(text, chars) if chars > 0 else ""


def turn_messages(turn: StoredTurn, result_limit: int = RESULT_LIMIT) -> list[Message]:
    """A stored turn as messages: its input, the assistant's text and tool calls (even with empty text), one
    tool message per call with its result or error (cut at ``result_limit`` characters)."""
    messages: list[Message] = []
    if turn.input:
        label = f"[{turn.input_source or 'system'}]"
        messages.append(Message("user", turn.input if turn.input.startswith(label) else f"{label} {turn.input}"))
    if turn.thinking or turn.tool_calls:
        calls = tuple(ToolCall(c.id, c.name, c.arguments) for c in turn.tool_calls)
        messages.append(Message("assistant", turn.thinking, tool_calls=calls))
    for call in turn.tool_calls:
        text = f"Error: {call.error}" if call.error else call.result
        messages.append(Message("tool", _cut(text, result_limit), tool_call_id=call.id))
    return messages


# --------------------------------------------------------------------------- assembly


@dataclass(frozen=True)
class _Tail:
    """The last message: the runtime's notes for this turn and the pending input, sized from its parts (most of
    which were sized before), not as one new text."""

    sections: tuple[str, ...]
    memories: Retrieved

    @property
    def message(self) -> Message:
        memory = self.memories.block()
        texts = [*self.sections[:1], *([memory] if memory else []), *self.sections[1:]]
        return Message("user", SECTION_JOIN.join(texts))

    def size(self, count: Callable[[str], int]) -> int:
        return (sum(count(s) + 1 for s in self.sections) + self.memories.block_tokens(count) + MESSAGE_OVERHEAD)


def _tail(parts: ContextParts, pending_text: str | None, *, memories: Retrieved = Retrieved(),
          references: Sequence[str] = (), events: Sequence[str] = (), notice: str = "") -> _Tail:
    """The sections in order; the memory block goes right after the status and goals (``_Tail.message``)."""
    head = [RUNTIME_HEADER]
    if parts.status:
        head.append(parts.status)
    if parts.goals:
        head.append("--- YOUR GOALS ---\n" + "\n".join(parts.goals) + "\n--- END GOALS ---")
    rest: list[str] = []
    if references:
        rest.append("--- EARLIER TURNS (not shown whole) ---\n" + "\n".join(references) + "\n--- END EARLIER TURNS ---")
    if events:
        rest.append("--- RECENT WAKE EVENTS ---\n" + "\n".join(events) + "\n--- END WAKE EVENTS ---")
    if notice:
        rest.append(notice)
    rest += list(parts.notes)
    if pending_text:
        rest.append(pending_text)
    return _Tail((SECTION_JOIN.join(head), *rest), memories)


def _notice(hidden: int, parts: ContextParts) -> str:
    if not hidden and not parts.more_turns:
        return ""
    where = " (older ones are in the summary)" if parts.summary else ""
    return f"[{hidden} earlier turns are not shown{where}; recall_facts and review_memory search what you stored.]"


class ContextAssembler:
    """Assembles one turn's context (the priorities: README, Memory)."""

    def __init__(self, retriever: MemoryRetriever | None = None, counter: TokenCounter | None = None) -> None:
        self.retriever = retriever
        self.counter = counter

    def assemble(self, parts: ContextParts, *, capacity: int, window: int | None = None) -> AssembledContext:
        window = window or capacity
        count = self.count_for(parts, capacity, window)
        exact = count is not estimate_tokens
        tools_cost = count(tools_text(parts.tools)) if parts.tools else 0
        system = [Message("system", parts.system)]
        pending_text = parts.pending.content if parts.pending else None
        if pending_text is not None:
            pending_text = _cut_to_tokens(pending_text, int(capacity * PENDING_SHARE), count)
        turns = list(parts.turns)
        recent, older = turns[-RECENT_ALWAYS:], turns[:-RECENT_ALWAYS]
        bare_tail = _tail(parts, pending_text, notice=_notice(len(older), parts))  # the notice at its longest
        fixed = size_of(system, count) + tools_cost + bare_tail.size(count)
        whole = {t.id: size_of(turn_messages(t), count) for t in turns}
        demand = fixed + sum(whole.values())
        over = demand > capacity - int(window * HEADROOM_SHARE) or parts.more_turns

        share = self.retriever.budget.for_window(window).total if self.retriever else 0  # memory's share, at most
        floor = min(int(capacity * MEMORY_FLOOR_SHARE), share)
        recent_messages = (self._fit_results(recent, capacity - fixed - floor, count)
                           or self._fit_results(recent, capacity - fixed, count))
        if recent_messages is None:
            return self._emergency(parts, system, tools_cost, pending_text, capacity, window, demand, count, exact)
        used = fixed + size_of(recent_messages, count)

        memories = Retrieved()
        if self.retriever is not None:
            room = min(share, max(int((capacity - used) * MEMORY_SHARE), min(floor, capacity - used)))
            memories = self.retriever.retrieve(parts.query, limit_tokens=room, count=count,
                                               shown_since=recent[0].timestamp if recent else None,
                                               outsiders=parts.outsiders)
            used += memories.block_tokens(count)
        summary: list[Message] = []
        if parts.summary:
            limit = min(int(capacity * SUMMARY_SHARE), capacity - used - MESSAGE_OVERHEAD)  # the share, or what is left
            text = _cut_to_tokens(f"[summary of earlier turns]\n{parts.summary}", limit, count) if limit > 0 else ""
            summary_cost = message_size(Message("user", text), count)
            if text and used + summary_cost <= capacity:
                summary = [Message("user", text)]
                used += summary_cost

        kept: list[list[Message]] = []
        index = len(older)
        for turn in reversed(older):
            cost = whole[turn.id]
            if used + cost > capacity:
                break
            kept.append(turn_messages(turn))
            used += cost
            index -= 1
        omitted = older[:index]

        references: list[CompactReference] = []
        for turn in reversed(omitted[-MAX_REFERENCES:]):
            ref = turn_reference(turn, count)
            if used + ref.compacted_tokens + 1 > capacity:
                break
            references.append(ref)
            used += ref.compacted_tokens + 1
        references.reverse()
        events: list[str] = []
        for event in parts.events:
            if used + event.compacted_tokens + 1 > capacity:
                break
            events.append(event.reference)
            used += event.compacted_tokens + 1

        def build() -> tuple[tuple[Message, ...], int]:
            tail = _tail(parts, pending_text, memories=memories, references=[r.reference for r in references],
                         events=events, notice=_notice(len(older) - len(kept) - len(references), parts))
            body = [m for block in reversed(kept) for m in block] + recent_messages
            return (tuple(system + summary + body + [tail.message]),
                    size_of(system + summary + body, count) + tail.size(count))

        messages, size = build()
        used = size + tools_cost
        while used > capacity:  # section headers and the notice were not counted above: give back the least needed
            if events:
                events.pop()
            elif references:
                references.pop(0)
            elif memories.items:
                memories = Retrieved()
            elif kept:
                kept.pop()
            else:
                recent_cost = size_of(recent_messages, count)
                fitted = self._fit_results(recent, capacity - (used - recent_cost), count)
                if fitted is None or size_of(fitted, count) >= recent_cost:
                    break
                recent_messages = fitted
            messages, size = build()
            used = size + tools_cost
        compacted = Compacted(tuple(references))
        shown = tuple(t.id for t in turns[len(turns) - len(recent) - len(kept):])
        util = Utilization(window, capacity, used, demand, len(shown),
                           len(turns) - len(shown) + (1 if parts.more_turns else 0), len(references),
                           compacted.ratio, capacity - used, memories.tokens, exact,
                           "compress" if over else "ok")
        return AssembledContext(messages, util, shown, memories)

    def count_for(self, parts: ContextParts, capacity: int, window: int | None = None) -> Callable[[str], int]:
        """The estimate when everything surely fits; otherwise exact counts (or the estimate's worst case)."""
        fixed = estimate_tokens(parts.system) + (estimate_tokens(tools_text(parts.tools)) if parts.tools else 0)
        rough = (fixed + estimate_tokens(parts.status) + sum(map(estimate_tokens, parts.goals))
                 + (estimate_tokens(parts.pending.content) if parts.pending else 0)
                 + estimate_tokens(parts.summary or "")
                 + sum(size_of(turn_messages(t), estimate_tokens) for t in parts.turns)
                 + sum(e.compacted_tokens for e in parts.events))
        if self.retriever is not None:  # memories take at most their room in ``assemble``, where used >= fixed
            budget = self.retriever.budget.for_window(window or capacity).total
            rough += min(budget, max(int((capacity - fixed) * MEMORY_SHARE), int(capacity * MEMORY_FLOOR_SHARE)))
        if rough <= (1 - COUNT_BAND) * capacity and not parts.more_turns:
            return estimate_tokens
        return _exact(self.counter or default_counter())

    @staticmethod
    def _fit_results(recent: Sequence[StoredTurn], room: int, count: Callable[[str], int]) -> list[Message] | None:
        """The recent turns with their tool results cut just enough to fit ``room``; ``None`` if they cannot."""
        for limit in RESULT_STEPS:
            messages = [m for turn in recent for m in turn_messages(turn, limit)]
            if size_of(messages, count) <= room:
                return messages
        return None

    def _emergency(self, parts: ContextParts, system: list[Message], tools_cost: int, pending_text: str | None,
                   capacity: int, window: int, demand: int, count: Callable[[str], int],
                   exact: bool) -> AssembledContext:
        last = list(parts.turns[-1:])
        room = capacity - tools_cost - size_of(system, count)
        for share in (PENDING_SHARE, 0.25, 0.1):
            text = _cut_to_tokens(pending_text, int(capacity * share), count) if pending_text else None
            tail = _tail(parts, text, notice="[Context emergency: only the last turn is shown.]")
            body = self._fit_results(last, room - tail.size(count), count)
            if body is not None:
                break
        else:
            body = []  # even the last turn does not fit next to the input
        messages = tuple(system + body + [tail.message])
        used = size_of(system + body, count) + tail.size(count) + tools_cost
        shown = tuple(t.id for t in last) if body else ()
        omitted = len(parts.turns) - len(shown) + (1 if parts.more_turns else 0)
        util = Utilization(window, capacity, used, demand, len(shown), omitted, 0, 1.0, capacity - used, 0, exact,
                           "emergency")
        return AssembledContext(messages, util, shown)

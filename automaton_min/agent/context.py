"""The messages a turn sends: system prompt, recent turns (newest that fit the budget), pending input.

Every kept turn appears whole: its input, the assistant's text and tool calls (even when
the text is empty: the reference dropped those, so the model never saw what it had just
done), and one tool message per call with its result or error.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from automaton_min.inference.router import COUNT_BAND, tools_text
from automaton_min.inference.types import Message, ToolCall, ToolSchema
from automaton_min.memory.tokens import TokenCounter, default_counter, estimate_tokens
from automaton_min.store.turns import StoredTurn

RESULT_LIMIT = 10_000


def _turn_messages(turn: StoredTurn) -> list[Message]:
    messages: list[Message] = []
    if turn.input:
        messages.append(Message("user", f"[{turn.input_source or 'system'}] {turn.input}"))
    if turn.thinking or turn.tool_calls:
        calls = tuple(ToolCall(c.id, c.name, c.arguments) for c in turn.tool_calls)
        messages.append(Message("assistant", turn.thinking, tool_calls=calls))
    for call in turn.tool_calls:
        text = f"Error: {call.error}" if call.error else call.result
        if len(text) > RESULT_LIMIT:
            text = text[:RESULT_LIMIT] + f"\n[truncated: {len(text) - RESULT_LIMIT} characters omitted]"
        messages.append(Message("tool", text, tool_call_id=call.id))
    return messages


def _size(messages: Sequence[Message], count: Callable[[str], int]) -> int:
    total = 0
    for message in messages:
        total += count(message.content) + 4
        for call in message.tool_calls:
            total += count(call.name) + count(str(call.arguments))
    return total


def build_messages(system_prompt: str, turns: Sequence[StoredTurn], pending: Message | None, *, budget_tokens: int,
                   extra_system: Sequence[str] = (), tools: Sequence[ToolSchema] = (),
                   counter: TokenCounter | None = None) -> tuple[Message, ...]:
    """Assemble the conversation, dropping the oldest turns that do not fit ``budget_tokens`` (which also pays
    for the tool schemas ``tools``, sent with the messages).

    Turns are first sized with the estimate, up to the first that surely overflows (the estimate above the
    budget by more than COUNT_BAND). When all of them surely fit (estimate at most (1 - COUNT_BAND) x budget)
    no exact count is made; otherwise the fixed part and those candidate turns, and no others, are counted
    exactly (cached per text), newest first, to decide where to cut.
    """
    head = [Message("system", system_prompt), *(Message("system", text) for text in extra_system if text)]
    tail = [pending] if pending else []
    schemas = tools_text(tuple(tools)) if tools else ""
    low, high = (1 - COUNT_BAND) * budget_tokens, (1 + COUNT_BAND) * budget_tokens
    used = _size(head + tail, estimate_tokens) + estimate_tokens(schemas)
    candidates: list[list[Message]] = []
    for turn in reversed(turns):
        block = _turn_messages(turn)
        cost = _size(block, estimate_tokens)
        if used + cost > high:
            break
        candidates.append(block)
        used += cost
    if used <= low:  # the candidates surely fit, the next turn (if any) surely does not
        kept = candidates
    else:
        count = _exact(counter or default_counter())
        room = budget_tokens - _size(head + tail, count) - count(schemas)
        kept = []
        for block in candidates:
            cost = _size(block, count)
            if cost > room:
                break
            kept.append(block)
            room -= cost
    dropped = len(turns) - len(kept)
    notice = [Message("user", f"[system] {dropped} earlier turns are not shown (context budget).")] if dropped else []
    body = [message for block in reversed(kept) for message in block]
    return tuple(head + notice + body + tail)


def _exact(counter: TokenCounter) -> Callable[[str], int]:
    """``counter.count``; when the exact encoder cannot load, the estimate scaled up by its error bound."""
    def count(text: str) -> int:
        n = counter.count(text)
        return n if counter.loaded or not text else math.ceil(n / (1 - COUNT_BAND))
    return count

"""The messages a turn sends: system prompt, recent turns (newest that fit the budget), pending input.

Every kept turn appears whole: its input, the assistant's text and tool calls (even when
the text is empty: the reference dropped those, so the model never saw what it had just
done), and one tool message per call with its result or error.
"""

from __future__ import annotations

from typing import Callable, Sequence

from automaton_min.inference.router import estimate_tokens
from automaton_min.inference.types import Message, ToolCall
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
                   extra_system: Sequence[str] = (), count: Callable[[str], int] = estimate_tokens) -> tuple[Message, ...]:
    """Assemble the conversation, dropping the oldest turns that do not fit ``budget_tokens``."""
    head = [Message("system", system_prompt), *(Message("system", text) for text in extra_system if text)]
    tail = [pending] if pending else []
    room = budget_tokens - _size(head, count) - _size(tail, count)
    kept: list[list[Message]] = []
    for turn in reversed(turns):
        block = _turn_messages(turn)
        cost = _size(block, count)
        if cost > room:
            break
        kept.append(block)
        room -= cost
    dropped = len(turns) - len(kept)
    notice = [Message("user", f"[system] {dropped} earlier turns are not shown (context budget).")] if dropped else []
    body = [message for block in reversed(kept) for message in block]
    return tuple(head + notice + body + tail)

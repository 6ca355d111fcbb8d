"""One contract for every wire format: the same scripted conversation, each server checking requests like the
real API, must give the same parsed results (content, tool call names and arguments, usage, finish reasons).

Conversation: system + user -> the assistant says a few words and calls two tools -> both results go back ->
the assistant answers in text. Plus: a truncated answer, and an answer with nothing in it.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import pytest

from automaton_min.inference.anthropic import AnthropicProvider
from automaton_min.inference.openai_compat import OpenAICompatibleProvider
from automaton_min.inference.types import ChatRequest, ChatResult, Message, ToolSchema, Usage
from standins.model_servers import AnthropicServer, OpenAIServer, anthropic_answer, openai_answer

KEY = "sk-contract-0123456789abcdef"
TOOLS = (
    ToolSchema("get_weather", "Weather for a city.", {"type": "object", "properties": {"city": {"type": "string"}},
                                                      "required": ["city"]}),
    ToolSchema("get_time", "Local time in a city.", {"type": "object", "properties": {"city": {"type": "string"},
                                                                                      "format": {"type": "string"}}}),
)
SYSTEM = Message("system", "You are ada, an automaton. Use tools.")
USER = Message("user", "What is the weather and the time in Paris?")
CALLS = (("get_weather", {"city": "Paris"}), ("get_time", {"city": "Paris", "format": "24h"}))
RESULTS = ("sunny, 21 C", "14:05")


@dataclass
class Wire:
    """One wire format: its server, a provider pointed at it, and how to script each kind of answer."""

    name: str
    server: Any
    provider: Any
    tool_answer: Callable[[str, list[tuple[str, str, dict]], tuple[int, int]], Any]
    text_answer: Callable[[str, tuple[int, int], str], Any]
    tool_results_seen: Callable[[dict], dict[str, str]]
    model: str


def _openai_results(body: dict) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


def _anthropic_results(body: dict) -> dict[str, str]:
    return {block["tool_use_id"]: block.get("content", "") for m in body["messages"] if m["role"] == "user"
            for block in m["content"] if block["type"] == "tool_result"}


def _openai_wire(name: str, server: OpenAIServer, provider_name: str, model: str, key: str | None) -> Wire:
    return Wire(
        name, server, OpenAICompatibleProvider(server.url, key, provider_name=provider_name),
        tool_answer=lambda text, calls, usage: openai_answer(text or None, [(i, n, _json(a)) for i, n, a in calls], usage=usage),
        text_answer=lambda text, usage, finish: openai_answer(text, usage=usage, finish_reason=finish),
        tool_results_seen=_openai_results, model=model,
    )


def _json(arguments: dict) -> str:
    return json.dumps(arguments)


WIRES = ("openai", "llamacpp", "anthropic")
ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens"}


@contextmanager
def open_wire(name: str) -> Iterator[Wire]:
    if name == "openai":
        with OpenAIServer(mode="openai", api_key=KEY) as server:
            yield _openai_wire("openai", server, "openai", "gpt-5.2", KEY)
    elif name == "llamacpp":
        with OpenAIServer(mode="llamacpp") as server:
            yield _openai_wire("llamacpp", server, "llamacpp", "gemma-3-270m", None)
    else:
        with AnthropicServer(api_key=KEY) as server:
            yield Wire(
                "anthropic", server, AnthropicProvider(KEY, base_url=server.url),
                tool_answer=lambda text, calls, usage: anthropic_answer(text, calls, usage=usage),
                text_answer=lambda text, usage, finish: anthropic_answer(text, usage=usage, stop_reason=ANTHROPIC_STOP[finish]),
                tool_results_seen=_anthropic_results, model="claude-sonnet-4",
            )


@pytest.fixture(params=WIRES)
def wire(request) -> Iterator[Wire]:
    with open_wire(request.param) as opened:
        yield opened


def summary(result: ChatResult) -> tuple:
    """What must be equal across wire formats (ids are the providers' own and differ)."""
    return (result.content, tuple((c.name, c.arguments, c.argument_error) for c in result.tool_calls), result.usage,
            result.finish_reason)


def ask(wire: Wire, *messages: Message) -> ChatRequest:
    return ChatRequest(model=wire.model, messages=messages, max_tokens=1024, tools=TOOLS, timeout_s=10)


def test_tool_round_trip_gives_the_same_results_on_every_wire(wire: Wire) -> None:
    provider_ids = [f"id_{wire.name}_{n}" for n in range(len(CALLS))]
    wire.server.script(
        wire.tool_answer("Let me look that up.", [(i, n, a) for i, (n, a) in zip(provider_ids, CALLS, strict=True)], (52, 31)),
        wire.text_answer("It is sunny and 21 C in Paris; the time is 14:05.", (97, 18), "stop"),
    )
    first = wire.provider.chat(ask(wire, SYSTEM, USER))
    assert summary(first) == ("Let me look that up.", tuple((n, a, None) for n, a in CALLS), Usage(52, 31), "tool_calls")
    assert [c.id for c in first.tool_calls] == provider_ids

    history = (SYSTEM, USER, Message("assistant", first.content, tool_calls=first.tool_calls),
               *(Message("tool", text, tool_call_id=c.id) for c, text in zip(first.tool_calls, RESULTS, strict=True)))
    second = wire.provider.chat(ask(wire, *history))
    assert summary(second) == ("It is sunny and 21 C in Paris; the time is 14:05.", (), Usage(97, 18), "stop")

    assert wire.server.rejections == []
    assert wire.tool_results_seen(wire.server.requests[1].body) == dict(zip(provider_ids, RESULTS, strict=True))
    assert wire.tool_results_seen(wire.server.requests[0].body) == {}
    assert (first.provider, second.provider) == (wire.provider.provider_name,) * 2


def test_a_truncated_answer_reports_length(wire: Wire) -> None:
    wire.server.script(wire.text_answer("It is sunny and", (40, 4), "length"))
    result = wire.provider.chat(ask(wire, SYSTEM, USER))
    assert summary(result) == ("It is sunny and", (), Usage(40, 4), "length")


def test_an_empty_answer_is_an_empty_result(wire: Wire) -> None:
    wire.server.script(wire.text_answer("", (40, 0), "stop"))
    result = wire.provider.chat(ask(wire, SYSTEM, USER))
    assert summary(result) == ("", (), Usage(40, 0), "stop")


def test_a_tool_call_without_text(wire: Wire) -> None:
    wire.server.script(wire.tool_answer("", [("only_1", "get_weather", {"city": "Oslo"})], (30, 9)))
    result = wire.provider.chat(ask(wire, SYSTEM, USER))
    assert summary(result) == ("", (("get_weather", {"city": "Oslo"}, None),), Usage(30, 9), "tool_calls")


def test_every_wire_parses_the_conversation_identically() -> None:
    """The same answers over all three servers, compared with each other rather than with a constant."""
    outcomes = {}
    for name in WIRES:
        with open_wire(name) as current:
            current.server.script(
                current.tool_answer("Checking.", [(f"c{n}", tool, args) for n, (tool, args) in enumerate(CALLS)], (52, 31)),
                current.text_answer("Done.", (97, 18), "stop"),
            )
            first = current.provider.chat(ask(current, SYSTEM, USER))
            history = (SYSTEM, USER, Message("assistant", first.content, tool_calls=first.tool_calls),
                       *(Message("tool", text, tool_call_id=c.id) for c, text in zip(first.tool_calls, RESULTS, strict=True)))
            second = current.provider.chat(ask(current, *history))
            assert current.server.rejections == []
            outcomes[name] = (summary(first), [c.id for c in first.tool_calls], summary(second))
    assert outcomes["openai"] == outcomes["llamacpp"] == outcomes["anthropic"]

"""Opt-in acceptance against a real llama.cpp server (``pytest -m llm``); skipped unless ``AUTOMATON_LLAMACPP_URL``
names one, e.g. ``http://127.0.0.1:8080``. ``AUTOMATON_LLAMACPP_MODEL`` picks the model name (default ``local``;
single-model servers ignore it). How to start one with a small Gemma GGUF: shared/reference/testing-peers.md
("A real LLM with tool calls"):

    python -m llama_cpp.server --model gemma3-270m.gguf --host 127.0.0.1 --port 8080 \\
        --chat_format chatml-function-calling
    AUTOMATON_LLAMACPP_URL=http://127.0.0.1:8080 python -m pytest -m llm tests/test_llm_llamacpp.py
"""

from __future__ import annotations

import os

import pytest

from automaton_min.inference.openai_compat import OpenAICompatibleProvider
from automaton_min.inference.types import ChatRequest, ChatResult, Message, ToolSchema

URL = os.environ.get("AUTOMATON_LLAMACPP_URL", "").strip()
MODEL = os.environ.get("AUTOMATON_LLAMACPP_MODEL", "local").strip() or "local"
ATTEMPTS = 4  # small models sometimes answer in text instead of calling the tool

pytestmark = [
    pytest.mark.llm,
    pytest.mark.skipif(not URL, reason="set AUTOMATON_LLAMACPP_URL to a running llama.cpp server to run this"),
]

WEATHER = ToolSchema(
    "get_weather", "Get the current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}}, "required": ["city"]},
)
SYSTEM = Message("system", "You are a helpful assistant that uses tools.")  # wording a 270M model reliably acts on
USER = Message("user", "What is the weather in Paris? Use the get_weather tool.")


def test_a_real_llamacpp_server_calls_a_tool_and_accepts_its_result() -> None:
    provider = OpenAICompatibleProvider(URL, os.environ.get("AUTOMATON_LLAMACPP_KEY") or None, provider_name="llamacpp")
    answers: list[ChatResult] = []
    for _ in range(ATTEMPTS):
        result = provider.chat(ChatRequest(MODEL, (SYSTEM, USER), max_tokens=128, tools=(WEATHER,), temperature=0.2,
                                           timeout_s=120))
        answers.append(result)
        if result.tool_calls:
            break
    else:
        pytest.fail(f"no tool call in {ATTEMPTS} attempts; the model said: {[a.content[:80] for a in answers]}")

    calls = result.tool_calls
    assert len({c.id for c in calls}) == len(calls) and all(c.id for c in calls)
    assert any(c.name == "get_weather" for c in calls), [c.name for c in calls]
    # the arguments were parsed (or the failure explained); never a crash
    assert all(isinstance(c.arguments, dict) and (c.argument_error is None or c.arguments == {}) for c in calls)

    history = (SYSTEM, USER, Message("assistant", result.content, tool_calls=calls),
               *(Message("tool", "Sunny, 21 C." if c.name == "get_weather" else "error: unknown tool", tool_call_id=c.id)
                 for c in calls))
    # a second call carrying the results must be accepted (2xx): chat raises ProviderError on anything else,
    # e.g. llama.cpp's 500 for "content": null next to tool_calls
    second = provider.chat(ChatRequest(MODEL, history, max_tokens=128, tools=(WEATHER,), temperature=0.2, timeout_s=120))
    assert isinstance(second.content, str)
    assert second.provider == "llamacpp"

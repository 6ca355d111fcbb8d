"""Fuzz the OpenAI-compatible and Anthropic answer parsers: any body gives a ChatResult or a typed InferenceError."""

from __future__ import annotations

import json
import sys

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automaton_min.inference.anthropic import AnthropicProvider, parse_message
from automaton_min.inference.openai_compat import OpenAICompatibleProvider, parse_chat_completion
from automaton_min.inference.types import ChatRequest, ChatResult, InferenceError, Message
from automaton_min.inference.wire_common import parse_arguments
from automaton_min.net.http import Response
from standins.model_servers import OpenAIServer, openai_answer

pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")


@pytest.fixture(autouse=True)
def production_recursion_limit():
    """The runtime runs with Python's default limit (1000), where json.loads of deep nesting raises RecursionError.
    py_ecc, imported by test-only dependencies (eth_account), raises the limit to 100000 for the whole session;
    under it the C JSON scanner overflows the C stack and the process dies (SIGSEGV) before any limit is hit."""
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(saved)


SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

HUGE = "x" * 1_000_000
odd_text = st.text(max_size=40) | st.sampled_from(["", HUGE, "\ud800", "\x00", '{"a": 1', "[" * 50_000,
                                                   '{"n": 1' + "0" * 5000 + "}", '"{\\"a\\": 1}"', "null", "[1]"])
scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True) | odd_text)
anything = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10)
arguments = anything | odd_text | st.dictionaries(st.text(max_size=5), anything, max_size=3)
tool_names = st.sampled_from(["exec", "write_file", "no_such_tool", "", "x" * 10_000]) | anything

openai_call = st.fixed_dictionaries({}, optional={
    "id": anything, "type": st.sampled_from(["function", "other"]) | anything,
    "function": st.fixed_dictionaries({}, optional={"name": tool_names, "arguments": arguments}) | anything})
openai_message = st.fixed_dictionaries({}, optional={
    "role": anything, "content": anything | st.lists(st.fixed_dictionaries({"type": anything, "text": anything})),
    "refusal": anything, "tool_calls": st.lists(openai_call, max_size=5) | st.just([{"function": {"name": "exec",
        "arguments": "not json"}, "id": "same"}] * 100) | anything})
openai_body = st.fixed_dictionaries({}, optional={
    "choices": st.lists(st.fixed_dictionaries({}, optional={"message": openai_message | anything,
                                                            "finish_reason": anything}) | anything, max_size=3) | anything,
    "usage": st.fixed_dictionaries({}, optional={"prompt_tokens": anything, "completion_tokens": anything}) | anything,
    "model": anything, "error": anything}) | anything

anthropic_block = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["text", "tool_use", "thinking"]) | anything, "text": anything, "id": anything,
    "name": tool_names, "input": arguments})
anthropic_body = st.fixed_dictionaries({}, optional={
    "content": st.lists(anthropic_block | anything, max_size=5) | st.just([{"type": "tool_use", "id": "t",
        "name": "exec", "input": "not json"}] * 100) | anything,
    "usage": st.fixed_dictionaries({}, optional={k: anything for k in (
        "input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")}) | anything,
    "stop_reason": anything, "model": anything}) | anything


def _checked(result: ChatResult) -> None:
    assert isinstance(result, ChatResult) and isinstance(result.content, str)
    ids = [call.id for call in result.tool_calls]
    assert len(ids) == len(set(ids))
    for call in result.tool_calls:
        assert isinstance(call.arguments, dict) and isinstance(call.name, str)


@SETTINGS
@given(openai_body)
def test_openai_bodies_parse_or_raise_a_provider_error(body) -> None:
    try:
        _checked(parse_chat_completion(body, "openai", "m"))
    except InferenceError as exc:
        assert str(exc)


@SETTINGS
@given(anthropic_body)
def test_anthropic_bodies_parse_or_raise_a_provider_error(body) -> None:
    try:
        _checked(parse_message(body, "m"))
    except InferenceError as exc:
        assert str(exc)


@SETTINGS
@given(arguments)
def test_tool_arguments_never_raise(value) -> None:
    parsed, raw, error = parse_arguments(value)
    assert isinstance(parsed, dict) and isinstance(raw, str) and (error is None or isinstance(error, str))


@pytest.mark.parametrize("text", ['{"n": 1' + "0" * 5000 + "}", "[" * 100_000, '"' + "[" * 100_000 + '"'])
def test_arguments_past_the_digit_limit_or_the_stack_are_an_argument_error(text: str) -> None:
    """Regression: json.loads raised a plain ValueError (no .msg: AttributeError) or RecursionError."""
    parsed, raw, error = parse_arguments(text)
    assert parsed == {} and raw == text
    assert error is not None or text.startswith('"')


def _request() -> ChatRequest:
    return ChatRequest(model="m", messages=(Message(role="user", content="hi"),), max_tokens=10)


def _sender(raw: bytes, status: int):
    def send(method, url, **kwargs):
        return Response(status=status, headers={"Content-Type": "application/json"}, body=raw, url=url)
    return send


raw_bodies = (st.binary(max_size=200) | openai_body.map(lambda b: orjson.dumps(b, default=str, option=orjson.OPT_PASSTHROUGH_SUBCLASS)
                                                        if _dumpable(b) else b"{}")
              | st.sampled_from([b"", b"\xff\xfe\x00", b'{"choices": [{"message": {"content": "\xff"}}]}',
                                 b"[" * 100_000, b"{" * 10_000, b"1" * 5000]))


def _dumpable(value) -> bool:
    try:
        orjson.dumps(value)
        return True
    except (orjson.JSONEncodeError, TypeError):
        return False


@SETTINGS
@given(raw_bodies, st.sampled_from([200, 200, 201, 400, 401, 404, 413, 429, 500, 503]))
def test_raw_bytes_through_both_providers_give_a_result_or_an_inference_error(raw: bytes, status: int) -> None:
    providers = [OpenAICompatibleProvider("http://127.0.0.1:9/v1", "sk-test-key-123456", send=_sender(raw, status)),
                 AnthropicProvider("sk-ant-test-key-123456", base_url="http://127.0.0.1:9", send=_sender(raw, status))]
    for provider in providers:
        try:
            _checked(provider.chat(_request()))
        except InferenceError as exc:
            assert "\n" not in str(exc) and "sk-test-key-123456" not in str(exc)


@pytest.mark.parametrize("status", [400, 401, 413, 500])
def test_an_error_body_nested_past_the_stack_is_a_provider_error(status: int) -> None:
    """Regression: error_detail and the refusal check ran json.loads on it and raised RecursionError."""
    provider = OpenAICompatibleProvider("http://127.0.0.1:9/v1", send=_sender(b"[" * 100_000, status))
    with pytest.raises(InferenceError) as caught:
        provider.chat(_request())
    assert len(str(caught.value)) < 1000


# ------------------------------------------------------------------ through the real agent


@pytest.fixture
def model():
    with OpenAIServer(mode="llamacpp") as server:
        yield server


def test_a_turn_of_100_malformed_calls_runs_at_most_ten_and_the_loop_survives(agent_for, model) -> None:
    agent = agent_for()
    calls = [{"id": "dup", "type": "function", "function": {"name": "exec", "arguments": "{not json"}}] * 40
    calls += [(f"u{i}", "no_such_tool", json.dumps({"x": "y" * 1000})) for i in range(30)]
    calls += [(f"n{i}", "write_file", ["not", "an", "object"]) for i in range(30)]
    model.script(openai_answer("huge " + "z" * 200_000, calls), openai_answer("done"))
    result = agent.loop.run_cycle("test")
    assert result.turns >= 1
    assert agent.db.scalar("SELECT COUNT(*) FROM tool_calls") == 10
    assert len(model.requests) == 2  # the loop went on to the next turn with the errors in its history
    assert agent.db.scalar("SELECT COUNT(*) FROM turns") >= 1

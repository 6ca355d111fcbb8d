"""The two wire formats against loopback servers that check requests like the real APIs (tests/standins/model_servers.py):
request shapes, the Anthropic transformation, token-limit field, base URLs, auth, and every malformed answer."""

from __future__ import annotations

import re
import socket

import pytest

from automaton_min.inference.anthropic import AnthropicProvider, messages_url, transform_messages, wire_id
from automaton_min.inference.openai_compat import OpenAICompatibleProvider, chat_completions_url, token_limit_field
from automaton_min.inference.types import (ChatRequest, ChatResult, InferenceError, Message, ModelUnusable, ProviderError,
                                          ToolCall, ToolSchema, Usage)
from automaton_min.inference.wire_common import MISSING_RESULT, ProviderUnreachable, parse_arguments, repair_tool_pairing, unique_call_ids
from automaton_min.net.http import request
from automaton_min.net.resilient import CircuitOpenError
from automaton_min.log import scrub
from standins.loopback_http import Reply
from standins.model_servers import AnthropicServer, OpenAIServer, anthropic_answer, openai_answer

OPENAI_KEY = "sk-test-openai-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-0123456789abcdef"
WEATHER = ToolSchema("get_weather", "Weather for a city.", {"type": "object", "properties": {"city": {"type": "string"}},
                                                             "required": ["city"]})
HTML_502 = (b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n"
            b"<hr><center>nginx/1.25.3</center>\r\n" + b"<!-- padding -->\r\n" * 40 + b"</body>\r\n</html>\r\n")


def ask(*messages: Message, model: str = "gpt-4o-mini", tools: tuple[ToolSchema, ...] = (), max_tokens: int = 256,
        temperature: float | None = None) -> ChatRequest:
    return ChatRequest(model=model, messages=messages, max_tokens=max_tokens, tools=tools, temperature=temperature,
                       timeout_s=10)


HELLO = (Message("system", "You are ada."), Message("user", "Hello"))


def call(call_id: str, name: str = "get_weather", **arguments) -> ToolCall:
    return ToolCall(call_id, name, arguments)


@pytest.fixture
def openai():
    with OpenAIServer(mode="openai", api_key=OPENAI_KEY) as server:
        yield server


@pytest.fixture
def llamacpp():
    with OpenAIServer(mode="llamacpp") as server:
        yield server


@pytest.fixture
def anthropic():
    with AnthropicServer(api_key=ANTHROPIC_KEY) as server:
        yield server


def oai(server: OpenAIServer, key: str | None = OPENAI_KEY, **kwargs) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(server.url, key, **kwargs)


def ant(server: AnthropicServer, key: str = ANTHROPIC_KEY, **kwargs) -> AnthropicProvider:
    return AnthropicProvider(key, base_url=server.url, **kwargs)


def openai_result(server: OpenAIServer, answer) -> ChatResult:
    server.script(answer)
    result = oai(server).chat(ask(*HELLO))
    assert server.rejections == []
    return result


def anthropic_result(server: AnthropicServer, answer) -> ChatResult:
    server.script(answer)
    result = ant(server).chat(ask(*HELLO, model="claude-sonnet-4"))
    assert server.rejections == []
    return result


# =========================================================================================== OpenAI: requests


def test_openai_request_body_and_headers_are_exact(openai) -> None:
    openai.script(openai_answer("Hi."))
    result = oai(openai).chat(ask(*HELLO, tools=(WEATHER,), temperature=0.2))
    assert openai.rejections == []
    assert openai.last.path == "/v1/chat/completions"
    assert openai.last.body == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": "You are ada."}, {"role": "user", "content": "Hello"}],
        "stream": False,
        "max_tokens": 256,
        "temperature": 0.2,
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
                                                    "parameters": WEATHER.parameters}}],
        "tool_choice": "auto",
    }
    assert openai.last.header("Authorization") == f"Bearer {OPENAI_KEY}"
    assert openai.last.header("Content-Type") == "application/json"
    assert result == ChatResult("Hi.", (), Usage(10, 5), "stop", "stand-in-model", "openai")


def test_openai_without_tools_or_temperature_sends_neither(openai) -> None:
    openai.script(openai_answer("Hi."))
    oai(openai).chat(ask(*HELLO))
    assert set(openai.last.body) == {"model", "messages", "stream", "max_tokens"}


def test_openai_name_field_is_passed_on(openai) -> None:
    openai.script(openai_answer("Hi."))
    oai(openai).chat(ask(Message("user", "Hello", name="creator")))
    assert openai.last.body["messages"] == [{"role": "user", "content": "Hello", "name": "creator"}]


def test_openai_tool_round_trip_shapes(openai) -> None:
    history = (*HELLO, Message("assistant", "", tool_calls=(call("call_a", city="Paris"),)),
               Message("tool", "sunny", tool_call_id="call_a"))
    openai.script(openai_answer("It is sunny."))
    oai(openai).chat(ask(*history, tools=(WEATHER,)))
    assert openai.rejections == []
    assert openai.last.body["messages"][2:] == [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
    ]


def test_llamacpp_stand_in_really_answers_500_to_null_content_with_tool_calls(llamacpp) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                                "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"}]}
    answer = request("POST", llamacpp.url + "/v1/chat/completions", json=body, timeout=5)
    assert answer.status == 500
    assert llamacpp.rejections == ["llama.cpp: null content next to tool_calls"]


def test_assistant_tool_calls_are_sent_with_empty_string_content_so_llamacpp_accepts_them(llamacpp) -> None:
    history = (*HELLO, Message("assistant", tool_calls=(call("call_0", city="Oslo"),)),
               Message("tool", "rain", tool_call_id="call_0"))
    llamacpp.script(openai_answer("Rain in Oslo."))
    result = oai(llamacpp, None, provider_name="llamacpp").chat(ask(*history, model="gemma", tools=(WEATHER,)))
    assert llamacpp.rejections == []
    assert llamacpp.last.body["messages"][2]["content"] == ""
    assert result.content == "Rain in Oslo."


def test_history_arguments_that_were_not_json_are_sent_back_as_an_object(llamacpp) -> None:
    broken = ToolCall("call_0", "get_weather", {}, raw_arguments="{city: Paris", argument_error="not JSON")
    history = (*HELLO, Message("assistant", tool_calls=(broken,)), Message("tool", "error: bad arguments", tool_call_id="call_0"))
    llamacpp.script(openai_answer("Sorry."))
    oai(llamacpp, None, provider_name="llamacpp").chat(ask(*history, model="gemma"))
    assert llamacpp.rejections == []
    assert llamacpp.last.body["messages"][2]["tool_calls"][0]["function"]["arguments"] == "{}"


def test_llamacpp_stand_in_really_refuses_non_json_history_arguments(llamacpp) -> None:
    body = {"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
                                                              "function": {"name": "f", "arguments": "{"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"}]}
    assert request("POST", llamacpp.url + "/v1/chat/completions", json=body, timeout=5).status == 500


def test_valid_history_arguments_are_sent_back_verbatim(openai) -> None:
    raw = '{"city":"Paris", "days": 2}'
    history = (*HELLO, Message("assistant", tool_calls=(ToolCall("c1", "get_weather", {"city": "Paris", "days": 2}, raw),)),
               Message("tool", "ok", tool_call_id="c1"))
    openai.script(openai_answer("Done."))
    oai(openai).chat(ask(*history))
    assert openai.last.body["messages"][2]["tool_calls"][0]["function"]["arguments"] == raw


def test_unpaired_tool_results_and_unanswered_calls_are_repaired_before_sending(openai) -> None:
    history = (
        Message("tool", "orphan from a trimmed history", tool_call_id="gone"),
        Message("user", "go on"),
        Message("assistant", "", tool_calls=(call("a"), call("b"))),
        Message("tool", "A", tool_call_id="a"),
        Message("tool", "stray", tool_call_id="zzz"),
        Message("user", "and?"),
    )
    openai.script(openai_answer("ok"))
    oai(openai).chat(ask(*history))
    assert openai.rejections == []
    assert [(m["role"], m.get("tool_call_id"), m["content"]) for m in openai.last.body["messages"]] == [
        ("user", None, "[tool result gone] orphan from a trimmed history"),
        ("user", None, "go on"),
        ("assistant", None, ""),
        ("tool", "a", "A"),
        ("tool", "b", MISSING_RESULT),
        ("user", None, "[tool result zzz] stray"),
        ("user", None, "and?"),
    ]


def test_openai_stand_in_really_refuses_an_unanswered_tool_call(openai) -> None:
    body = {"model": "gpt-4o", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
                                                              "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": "well?"}]}
    answer = request("POST", openai.url + "/v1/chat/completions", json=body, timeout=5,
                     headers={"Authorization": f"Bearer {OPENAI_KEY}"})
    assert answer.status == 400 and "did not have response messages: c" in answer.json()["error"]["message"]


def test_empty_message_list_is_an_error_and_nothing_is_sent(openai, anthropic) -> None:
    with pytest.raises(InferenceError, match="no messages"):
        oai(openai).chat(ask())
    with pytest.raises(InferenceError, match="no messages"):
        ant(anthropic).chat(ask())
    assert openai.requests == [] and anthropic.requests == []


def test_request_timeout_is_passed_to_send(openai) -> None:
    seen = {}

    def send(method, url, **kwargs):
        seen.update(kwargs, method=method, url=url)
        return request(method, url, **kwargs)

    openai.script(openai_answer("ok"))
    OpenAICompatibleProvider(openai.url, OPENAI_KEY, send=send).chat(
        ChatRequest("gpt-4o", HELLO, 100, timeout_s=7.5))
    assert seen["timeout"] == 7.5 and seen["method"] == "POST" and seen["url"] == openai.url + "/v1/chat/completions"


# =========================================================================================== token-limit field


@pytest.mark.parametrize(("model", "provider", "field"), [
    ("gpt-5.2", "openai", "max_completion_tokens"),
    ("gpt-5-mini", "openai", "max_completion_tokens"),
    ("gpt-4.1", "openai", "max_completion_tokens"),
    ("gpt-4.1-nano", "openai", "max_completion_tokens"),
    ("o1", "openai", "max_completion_tokens"),
    ("o3-mini", "openai", "max_completion_tokens"),
    ("o4-mini", "conway", "max_completion_tokens"),
    ("gpt-5.2", "conway", "max_completion_tokens"),
    ("GPT-5", "OpenAI", "max_completion_tokens"),
    ("gpt-4o", "openai", "max_tokens"),
    ("gpt-4", "openai", "max_tokens"),
    ("gpt-3.5-turbo", "openai", "max_tokens"),
    ("omni-moderation", "openai", "max_tokens"),
    ("o0", "openai", "max_tokens"),
    ("gpt-5.2", "ollama", "max_tokens"),
    ("gpt-5.2", "llamacpp", "max_tokens"),
    ("o3", "vllm", "max_tokens"),
    ("llama3.2:latest", "ollama", "max_tokens"),
    ("claude-sonnet-4", "conway", "max_tokens"),
])
def test_token_limit_field(model: str, provider: str, field: str) -> None:
    assert token_limit_field(model, provider) == field


def test_real_openai_refusal_of_max_tokens_is_avoided(openai) -> None:
    openai.script(openai_answer("ok"), openai_answer("ok"))
    oai(openai).chat(ask(*HELLO, model="gpt-5.2", max_tokens=4096))
    oai(openai).chat(ask(*HELLO, model="gpt-4o", max_tokens=4096))
    assert openai.rejections == []
    assert openai.requests[0].body["max_completion_tokens"] == 4096 and "max_tokens" not in openai.requests[0].body
    assert openai.requests[1].body["max_tokens"] == 4096 and "max_completion_tokens" not in openai.requests[1].body


def test_openai_stand_in_really_refuses_max_tokens_for_gpt5(openai) -> None:
    answer = request("POST", openai.url + "/v1/chat/completions", timeout=5, headers={"Authorization": f"Bearer {OPENAI_KEY}"},
                     json={"model": "gpt-5.2", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status == 400 and "max_completion_tokens" in answer.json()["error"]["message"]


def test_local_servers_get_max_tokens_even_for_openai_model_names() -> None:
    with OpenAIServer(mode="ollama") as ollama:
        ollama.script(openai_answer("ok"))
        OpenAICompatibleProvider(ollama.url, "ollama", provider_name="ollama").chat(ask(*HELLO, model="gpt-5.2"))
        assert ollama.rejections == [] and ollama.last.body["max_tokens"] == 256


# =========================================================================================== base URLs


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/", "//", "/v1/chat/completions", "/v1/chat/completions/"])
def test_base_url_with_or_without_v1_reaches_the_endpoint(openai, suffix: str) -> None:
    openai.script(openai_answer("ok"))
    OpenAICompatibleProvider(f"  {openai.url}{suffix} ", OPENAI_KEY).chat(ask(*HELLO))
    assert [r.path for r in openai.all_requests] == ["/v1/chat/completions"]


@pytest.mark.parametrize("suffix", ["/openai", "/openai/v1", "/openai/v1/"])
def test_base_url_with_a_path_prefix_keeps_the_prefix(suffix: str) -> None:
    with OpenAIServer(prefix="/openai") as groq_like:
        groq_like.script(openai_answer("ok"))
        OpenAICompatibleProvider(groq_like.url + suffix, None, provider_name="groq").chat(ask(*HELLO))
        assert [r.path for r in groq_like.all_requests] == ["/openai/v1/chat/completions"]


@pytest.mark.parametrize(("base", "endpoint"), [
    ("https://api.openai.com", "https://api.openai.com/v1/chat/completions"),
    ("https://api.openai.com/v1", "https://api.openai.com/v1/chat/completions"),
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080/v1/chat/completions"),
    ("http://localhost:11434/v1/", "http://localhost:11434/v1/chat/completions"),
    ("https://api.groq.com/openai/v1", "https://api.groq.com/openai/v1/chat/completions"),
    ("https://api.conway.tech", "https://api.conway.tech/v1/chat/completions"),
])
def test_chat_completions_url(base: str, endpoint: str) -> None:
    assert chat_completions_url(base) == endpoint


@pytest.mark.parametrize("base", ["", "localhost:8080", "ftp://example.com", "http://", "/v1"])
def test_unusable_base_urls_are_refused(base: str) -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        OpenAICompatibleProvider(base)
    with pytest.raises(ValueError, match="http:// or https://"):
        AnthropicProvider(ANTHROPIC_KEY, base_url=base)


@pytest.mark.parametrize(("base", "endpoint"), [
    ("https://api.anthropic.com", "https://api.anthropic.com/v1/messages"),
    ("https://api.anthropic.com/", "https://api.anthropic.com/v1/messages"),
    ("https://api.anthropic.com/v1", "https://api.anthropic.com/v1/messages"),
    ("https://gw.example/anthropic/v1/messages", "https://gw.example/anthropic/v1/messages"),
])
def test_messages_url(base: str, endpoint: str) -> None:
    assert messages_url(base) == endpoint


# =========================================================================================== auth and secrets


def test_raw_authorization_for_the_conway_proxy() -> None:
    with OpenAIServer(api_key="cnwy_k_0123456789abcdef", auth_style="raw") as conway:
        conway.script(openai_answer("ok"))
        OpenAICompatibleProvider(conway.url, "cnwy_k_0123456789abcdef", provider_name="conway", auth_style="raw").chat(
            ask(*HELLO, model="gpt-5.2"))
        assert conway.rejections == []
        assert conway.last.header("Authorization") == "cnwy_k_0123456789abcdef"
        assert "max_completion_tokens" in conway.last.body


def test_no_key_sends_no_authorization_header(llamacpp) -> None:
    llamacpp.script(openai_answer("ok"))
    OpenAICompatibleProvider(llamacpp.url).chat(ask(*HELLO))
    assert llamacpp.last.header("Authorization") is None


def test_unknown_auth_style_is_refused() -> None:
    with pytest.raises(ValueError, match="auth_style"):
        OpenAICompatibleProvider("http://127.0.0.1:1", "k", auth_style="basic")


def test_openai_401_is_a_provider_error_without_the_key(openai) -> None:
    wrong = "sk-wrong-key-abcdef0123456789"
    with pytest.raises(ProviderError) as caught:
        OpenAICompatibleProvider(openai.url, wrong).chat(ask(*HELLO))
    assert openai.rejections and wrong in openai.rejections[0]  # the server did echo it
    message = str(caught.value)
    assert caught.value.status == 401
    assert message.startswith("inference error (openai): 401: invalid_request_error: Incorrect API key provided: [redacted]")
    assert wrong not in message and "\n" not in message


def test_anthropic_401_is_a_provider_error_without_the_key(anthropic) -> None:
    wrong = "sk-ant-wrong-0123456789abcdef"
    with pytest.raises(ModelUnusable) as caught:  # a ProviderError that is also a configuration error (exit 2)
        ant(anthropic, wrong).chat(ask(*HELLO))
    assert caught.value.status == 401 and caught.value.exit_code == 2
    assert str(caught.value) == ("inference error (anthropic): 401: authentication_error: invalid x-api-key; "
                                 "set anthropicApiKey to a valid Anthropic key")


def test_keys_never_appear_in_reprs_errors_or_logs() -> None:
    key, akey = "sk-secret-repr-0123456789", "sk-ant-secret-repr-0123456789"
    with OpenAIServer() as openai, AnthropicServer(api_key=akey) as anthropic:
        # gateways that echo the credentials they got into an HTML error page
        openai.script(lambda body: Reply(502, f"<html>bad gateway for {openai.last.header('Authorization')}</html>"))
        anthropic.script(lambda body: Reply(502, f"<html>bad gateway for {anthropic.last.header('x-api-key')}</html>"))
        providers = ((OpenAICompatibleProvider(openai.url, key), key), (AnthropicProvider(akey, base_url=anthropic.url), akey))
        for provider, secret in providers:
            assert secret not in repr(provider)
            with pytest.raises(ProviderError) as caught:
                provider.chat(ask(*HELLO))
            assert secret not in str(caught.value) and "bad gateway for " in str(caught.value)
            assert "[redacted]" in str(caught.value)
            assert scrub(f"header {secret}") == "header [redacted]"


# =========================================================================================== OpenAI: answers


def test_content_null_without_tool_calls_is_empty_text(openai) -> None:
    result = openai_result(openai, openai_answer(None))
    assert result.content == "" and result.tool_calls == ()


def test_content_parts_are_joined(openai) -> None:
    result = openai_result(openai, openai_answer([{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}, 7]))
    assert result.content == "Hello"


def test_a_refusal_without_content_becomes_the_text(openai) -> None:
    answer = openai_answer(None)
    answer["choices"][0]["message"]["refusal"] = "I can't help with that."
    assert openai_result(openai, answer).content == "I can't help with that."


def test_missing_usage_is_unknown_not_zero(openai) -> None:
    assert openai_result(openai, openai_answer("ok", usage=None)).usage == Usage(None, None)


def test_usage_that_is_not_a_count_is_unknown(openai) -> None:
    answer = openai_answer("ok", usage=None)
    answer["usage"] = {"prompt_tokens": "12", "completion_tokens": True}
    assert openai_result(openai, answer).usage == Usage(None, None)
    answer = openai_answer("ok", usage=None)
    answer["usage"] = {"prompt_tokens": 12, "completion_tokens": -1}
    assert openai_result(openai, answer).usage == Usage(12, None)


@pytest.mark.parametrize("finish", [..., None, ""])
def test_missing_finish_reason_is_stop(openai, finish) -> None:
    answer = openai_answer("ok")
    if finish is ...:
        del answer["choices"][0]["finish_reason"]
    else:
        answer["choices"][0]["finish_reason"] = finish
    assert openai_result(openai, answer).finish_reason == "stop"


def test_finish_reason_is_passed_through(openai) -> None:
    assert openai_result(openai, openai_answer("cut", finish_reason="length")).finish_reason == "length"


def test_unknown_fields_are_ignored(openai) -> None:
    answer = openai_answer("ok", system_fingerprint="fp_1", timings={"predicted_ms": 3.2}, choices=[
        {"index": 0, "finish_reason": "stop", "logprobs": {"content": []}, "delta": {},
         "message": {"role": "assistant", "content": "ok", "reasoning_content": "hmm", "annotations": [], "audio": None}}])
    result = openai_result(openai, answer)
    assert (result.content, result.finish_reason, result.tool_calls) == ("ok", "stop", ())


def test_answer_model_falls_back_to_the_requested_model(openai) -> None:
    answer = openai_answer("ok")
    del answer["model"]
    assert openai_result(openai, answer).model == "gpt-4o-mini"


def test_tool_call_arguments_parsed(openai) -> None:
    result = openai_result(openai, openai_answer(None, [("call_1", "get_weather", '{"city": "Paris"}')]))
    assert result.tool_calls == (ToolCall("call_1", "get_weather", {"city": "Paris"}, '{"city": "Paris"}', None),)
    assert result.finish_reason == "tool_calls"


def test_arguments_that_are_not_json_give_an_argument_error(openai) -> None:
    result = openai_result(openai, openai_answer(None, [("c", "get_weather", "{'city': 'Paris'}")]))
    (tool_call,) = result.tool_calls
    assert tool_call.arguments == {} and tool_call.raw_arguments == "{'city': 'Paris'}"
    assert tool_call.argument_error.startswith("tool arguments are not valid JSON")


@pytest.mark.parametrize(("arguments", "kind"), [('["Paris"]', "an array"), ('"Paris"', "a string"), ("42", "a number"),
                                                 ("null", "null"), ("true", "a boolean"), (["Paris"], "an array"), (3, "a number")])
def test_arguments_that_are_not_an_object_give_an_argument_error(openai, arguments, kind: str) -> None:
    (tool_call,) = openai_result(openai, openai_answer(None, [("c", "get_weather", arguments)])).tool_calls
    assert tool_call.arguments == {}
    assert tool_call.argument_error == f"tool arguments must be a JSON object, got {kind}"


def test_arguments_given_as_an_object_are_accepted(openai) -> None:
    (tool_call,) = openai_result(openai, openai_answer(None, [("c", "get_weather", {"city": "Paris"})])).tool_calls
    assert tool_call.arguments == {"city": "Paris"} and tool_call.argument_error is None
    assert tool_call.raw_arguments == '{"city": "Paris"}'


@pytest.mark.parametrize("arguments", ["", "  ", None])
def test_empty_arguments_mean_no_arguments(openai, arguments) -> None:
    (tool_call,) = openai_result(openai, openai_answer(None, [("c", "list_files", arguments)])).tool_calls
    assert tool_call.arguments == {} and tool_call.argument_error is None


def test_double_encoded_arguments_are_unwrapped(openai) -> None:
    (tool_call,) = openai_result(openai, openai_answer(None, [("c", "get_weather", '"{\\"city\\": \\"Paris\\"}"')])).tool_calls
    assert tool_call.arguments == {"city": "Paris"} and tool_call.argument_error is None


def test_duplicate_tool_call_ids_are_made_unique(openai) -> None:
    answer = openai_answer(None, [("call_0", "get_weather", '{"city": "Paris"}'), ("call_0", "get_weather", '{"city": "Rome"}'),
                                  ("call_0", "get_time", "{}")])
    result = openai_result(openai, answer)
    assert [(c.id, c.arguments.get("city")) for c in result.tool_calls] == [("call_0", "Paris"), ("call_0_1", "Rome"),
                                                                           ("call_0_2", None)]


def test_missing_and_empty_tool_call_ids_are_filled_in(openai) -> None:
    answer = openai_answer(None, [(None, "a", "{}"), ("", "b", "{}"), ("call_0", "c", "{}"), (7, "d", "{}")])
    ids = [c.id for c in openai_result(openai, answer).tool_calls]
    # "call_0" is the provider's and kept; the first call's generated "call_0" would clash, so it gets a suffix
    assert ids == ["call_0_2", "call_1", "call_0", "7"]
    assert len(set(ids)) == len(ids)


def test_tool_call_without_a_name_is_kept_with_an_error(openai) -> None:
    answer = openai_answer(None, [("x", "placeholder", "{}")])
    answer["choices"][0]["message"]["tool_calls"] = [{"id": "x", "type": "function", "function": {"arguments": "{}"}}, "junk",
                                                     {"id": "y", "type": "function"}]
    calls = openai_result(openai, answer).tool_calls
    assert [(c.id, c.name) for c in calls] == [("x", ""), ("y", "")]
    assert all(c.argument_error.startswith("the tool call has no function name") for c in calls)


@pytest.mark.parametrize("answer", [
    openai_answer("x", choices=[]),
    openai_answer("x", choices=...),
    openai_answer("x", choices=None),
    openai_answer("x", choices=["text"]),
    openai_answer("x", choices=[{"index": 0, "finish_reason": "stop"}]),
    openai_answer("x", choices=..., error={"message": "model overloaded", "type": "server_error"}),
    [1, 2, 3],
], ids=["empty", "missing", "null", "not-an-object", "no-message", "error-body", "array"])
def test_answers_without_a_usable_choice_are_provider_errors(openai, answer) -> None:
    openai.script(answer)
    with pytest.raises(ProviderError, match=r"^inference error \(openai\): the answer"):
        oai(openai).chat(ask(*HELLO))


def test_error_body_message_is_included(openai) -> None:
    openai.script(openai_answer("x", choices=..., error={"message": "model overloaded", "type": "server_error"}))
    with pytest.raises(ProviderError, match="has no choices: model overloaded"):
        oai(openai).chat(ask(*HELLO))


def test_html_502_page_is_a_one_line_truncated_provider_error(openai) -> None:
    openai.script(Reply(502, HTML_502, {"Content-Type": "text/html"}))
    with pytest.raises(ProviderError) as caught:
        oai(openai).chat(ask(*HELLO))
    message = str(caught.value)
    assert caught.value.status == 502
    assert message.startswith("inference error (openai): 502: <html> <head><title>502 Bad Gateway</title>")
    assert "\n" not in message and "\r" not in message and message.endswith("...") and len(message) < 260


def test_json_error_status_gives_status_and_message(openai) -> None:
    openai.script(Reply(429, {"error": {"message": "Rate limit reached for gpt-4o", "type": "requests", "code": "rate_limit_exceeded"}}))
    with pytest.raises(ProviderError) as caught:
        oai(openai).chat(ask(*HELLO))
    assert caught.value.status == 429
    assert str(caught.value) == "inference error (openai): 429: requests: Rate limit reached for gpt-4o"


@pytest.mark.parametrize(("body", "detail"), [(b"", "(empty body)"), (b'{"detail": "Not Found"}', "Not Found"),
                                              (b'{"error": "model not found"}', "model not found")])
def test_other_error_bodies(openai, body: bytes, detail: str) -> None:
    openai.script(Reply(404, body))
    with pytest.raises(ProviderError, match=r"^inference error \(openai\): 404: " + re.escape(detail)):
        oai(openai).chat(ask(*HELLO))


def test_a_2xx_body_that_is_not_json_is_a_provider_error(openai) -> None:
    openai.script(Reply(200, b"<html>captive portal</html>", {"Content-Type": "text/html"}))
    with pytest.raises(ProviderError, match="200 with a body that is not JSON: <html>captive portal</html>") as caught:
        oai(openai).chat(ask(*HELLO))
    assert caught.value.status == 200


def test_no_answer_is_provider_unreachable() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(ProviderUnreachable, match=r"^inference error \(llamacpp\): POST .* failed") as caught:
        OpenAICompatibleProvider(url, provider_name="llamacpp").chat(ask(*HELLO))
    assert isinstance(caught.value, InferenceError) and not isinstance(caught.value, ProviderError)


def test_an_open_circuit_breaker_is_provider_unreachable() -> None:
    def send(*args, **kwargs):
        raise CircuitOpenError("openai", 0.0, 30.0)

    with pytest.raises(ProviderUnreachable, match="circuit breaker open"):
        OpenAICompatibleProvider("https://api.openai.com", OPENAI_KEY, send=send).chat(ask(*HELLO))


# =========================================================================================== Anthropic: requests


def test_anthropic_request_body_and_headers_are_exact(anthropic) -> None:
    anthropic.script(anthropic_answer("Hi."))
    messages = (Message("system", "You are ada."), Message("system", "Be brief."), Message("user", "Hello"))
    result = ant(anthropic, api_version="2024-01-01").chat(ask(*messages, model="claude-sonnet-4", tools=(WEATHER,),
                                                               temperature=0.3))
    assert anthropic.rejections == []
    assert anthropic.last.path == "/v1/messages"
    assert anthropic.last.body == {
        "model": "claude-sonnet-4",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
        "system": "You are ada.\n\nBe brief.",
        "temperature": 0.3,
        "tools": [{"name": "get_weather", "description": "Weather for a city.", "input_schema": WEATHER.parameters}],
        "tool_choice": {"type": "auto"},
    }
    assert anthropic.last.header("x-api-key") == ANTHROPIC_KEY
    assert anthropic.last.header("anthropic-version") == "2024-01-01"
    assert anthropic.last.header("Authorization") is None
    assert result == ChatResult("Hi.", (), Usage(10, 5), "stop", "claude-standin", "anthropic")


def test_anthropic_defaults(anthropic) -> None:
    anthropic.script(anthropic_answer("Hi."))
    ant(anthropic).chat(ask(Message("user", "Hello")))
    assert set(anthropic.last.body) == {"model", "max_tokens", "messages"}
    assert anthropic.last.header("anthropic-version") == "2023-06-01"


def test_anthropic_transformation_of_a_whole_conversation(anthropic) -> None:
    history = (
        Message("system", "You are ada."),
        Message("user", "Weather in Paris and Rome?"),
        Message("user", "Quickly."),
        Message("assistant", "Checking.", tool_calls=(call("toolu_1", city="Paris"), call("toolu_2", city="Rome"))),
        Message("tool", "sunny", tool_call_id="toolu_1"),
        Message("tool", "rain", tool_call_id="toolu_2"),
        Message("user", "[inbox] a message arrived"),
        Message("assistant", "Paris is sunny,"),
        Message("assistant", "Rome is rainy."),
        Message("system", "Be brief."),
        Message("user", "Thanks"),
    )
    anthropic.script(anthropic_answer("You're welcome."))
    ant(anthropic).chat(ask(*history, model="claude-sonnet-4", tools=(WEATHER,)))
    assert anthropic.rejections == []
    assert anthropic.last.body["system"] == "You are ada.\n\nBe brief."
    assert anthropic.last.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}, {"type": "text", "text": "Quickly."}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "rain"},
            {"type": "text", "text": "[inbox] a message arrived"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Paris is sunny,"}, {"type": "text", "text": "Rome is rainy."}]},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
    ]


def test_tool_results_go_before_text_in_a_merged_user_message(anthropic) -> None:
    history = (Message("user", "go"), Message("assistant", tool_calls=(call("t1"),)), Message("tool", "done", tool_call_id="t1"),
               Message("user", "note"), Message("tool", "late result", tool_call_id="t1"))
    anthropic.script(anthropic_answer("ok"))
    ant(anthropic).chat(ask(*history))
    assert anthropic.rejections == []
    assert anthropic.last.body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "done"},
        {"type": "text", "text": "note"},
        {"type": "text", "text": "[tool result t1] late result"}]


def test_anthropic_stand_in_really_refuses_text_before_tool_result(anthropic) -> None:
    body = {"model": "c", "max_tokens": 5, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "tool_result", "tool_use_id": "t1"}]}]}
    answer = request("POST", anthropic.url + "/v1/messages", json=body, timeout=5,
                     headers={"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"})
    assert answer.status == 400 and "must come first" in answer.json()["error"]["message"]


@pytest.mark.parametrize("messages", [
    [{"role": "assistant", "content": "hi"}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "user", "content": [{"type": "text", "text": " "}]}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "a.b", "name": "f", "input": {}}]},
     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a.b"}]}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
     {"role": "user", "content": "b"}],
    [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "trailing "}],
], ids=["assistant-first", "same-role-twice", "blank-text", "bad-id", "unanswered-tool-use", "orphan-result", "trailing-space"])
def test_anthropic_stand_in_really_enforces_the_rules(anthropic, messages) -> None:
    answer = request("POST", anthropic.url + "/v1/messages", json={"model": "c", "max_tokens": 5, "messages": messages},
                     timeout=5, headers={"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"})
    assert answer.status == 400 and anthropic.rejections


def test_conversation_not_starting_with_user_gets_a_minimal_user_message(anthropic) -> None:
    anthropic.script(anthropic_answer("ok"), anthropic_answer("ok"))
    ant(anthropic).chat(ask(Message("system", "s"), Message("assistant", "I woke up."), Message("user", "hi")))
    assert anthropic.last.body["messages"][0] == {"role": "user", "content": [{"type": "text", "text": "Continue."}]}
    ant(anthropic).chat(ask(Message("system", "only a system prompt")))
    assert anthropic.last.body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Continue."}]}]
    assert anthropic.last.body["system"] == "only a system prompt"
    assert anthropic.rejections == []


def test_empty_texts_are_left_out(anthropic) -> None:
    history = (Message("user", "go"), Message("assistant", "", tool_calls=(call("t1"),)), Message("tool", "", tool_call_id="t1"),
               Message("user", "   "), Message("assistant", ""), Message("user", "next"))
    anthropic.script(anthropic_answer("ok"))
    ant(anthropic).chat(ask(*history))
    assert anthropic.rejections == []
    assert anthropic.last.body["messages"][1:] == [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}, {"type": "text", "text": "next"}]},
    ]


def test_ids_from_other_providers_are_made_acceptable_consistently(anthropic) -> None:
    odd = "functions.get_weather:0"
    history = (Message("user", "go"), Message("assistant", tool_calls=(call(odd),)), Message("tool", "ok", tool_call_id=odd))
    anthropic.script(anthropic_answer("ok"))
    ant(anthropic).chat(ask(*history))
    assert anthropic.rejections == []
    assert anthropic.last.body["messages"][1]["content"][0]["id"] == "functions_get_weather_0"
    assert anthropic.last.body["messages"][2]["content"][0]["tool_use_id"] == "functions_get_weather_0"
    assert wire_id(None) == "call" and wire_id("call__0_get_weather_cmpl-9f") == "call__0_get_weather_cmpl-9f"


def test_unanswered_tool_use_gets_an_error_result(anthropic) -> None:
    history = (Message("user", "go"), Message("assistant", "Calling.", tool_calls=(call("t1"), call("t2"))),
               Message("tool", "one", tool_call_id="t1"), Message("user", "you were interrupted"))
    anthropic.script(anthropic_answer("ok"))
    ant(anthropic).chat(ask(*history))
    assert anthropic.rejections == []
    assert anthropic.last.body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "one"},
        {"type": "tool_result", "tool_use_id": "t2", "content": MISSING_RESULT},
        {"type": "text", "text": "you were interrupted"}]


def test_final_assistant_message_loses_trailing_whitespace(anthropic) -> None:
    anthropic.script(anthropic_answer("ok"))
    ant(anthropic).chat(ask(Message("user", "Write JSON"), Message("assistant", "{\n  ")))
    assert anthropic.rejections == []
    assert anthropic.last.body["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": "{"}]}


def test_temperature_is_clamped_to_anthropics_range(anthropic) -> None:
    anthropic.script(anthropic_answer("ok"), anthropic_answer("ok"))
    ant(anthropic).chat(ask(Message("user", "hi"), temperature=1.7))
    assert anthropic.last.body["temperature"] == 1.0
    ant(anthropic).chat(ask(Message("user", "hi"), temperature=0))
    assert anthropic.last.body["temperature"] == 0
    assert anthropic.rejections == []


def test_tool_schema_without_type_gets_object(anthropic) -> None:
    anthropic.script(anthropic_answer("ok"))
    ant(anthropic).chat(ask(Message("user", "hi"), tools=(ToolSchema("noop", "Does nothing.", {"properties": {}}),)))
    assert anthropic.rejections == []
    assert anthropic.last.body["tools"][0]["input_schema"] == {"properties": {}, "type": "object"}


def test_anthropic_key_is_required() -> None:
    with pytest.raises(ValueError, match="API key"):
        AnthropicProvider("")


def test_transform_messages_needs_messages() -> None:
    with pytest.raises(InferenceError):
        transform_messages(())


# =========================================================================================== Anthropic: answers


def test_anthropic_text_and_tool_uses(anthropic) -> None:
    answer = anthropic_answer("Let me check.", [("toolu_01", "get_weather", {"city": "Paris"}), ("toolu_02", "get_time", {})],
                              usage=(120, 30))
    answer["content"].append({"type": "text", "text": "One moment."})
    result = anthropic_result(anthropic, answer)
    assert result.content == "Let me check.\nOne moment."
    assert result.tool_calls == (ToolCall("toolu_01", "get_weather", {"city": "Paris"}, '{"city": "Paris"}'),
                                 ToolCall("toolu_02", "get_time", {}, "{}"))
    assert result.usage == Usage(120, 30) and result.finish_reason == "tool_calls"


@pytest.mark.parametrize(("stop", "finish"), [("tool_use", "tool_calls"), ("end_turn", "stop"), ("max_tokens", "length"),
                                              ("stop_sequence", "stop_sequence"), ("refusal", "refusal"), (None, "stop"),
                                              (..., "stop")])
def test_anthropic_stop_reasons(anthropic, stop, finish: str) -> None:
    answer = anthropic_answer("ok")
    if stop is ...:
        del answer["stop_reason"]
    else:
        answer["stop_reason"] = stop
    assert anthropic_result(anthropic, answer).finish_reason == finish


def test_anthropic_answer_with_nothing_in_it_is_a_valid_empty_result(anthropic) -> None:
    result = anthropic_result(anthropic, anthropic_answer(""))
    assert (result.content, result.tool_calls, result.finish_reason) == ("", (), "stop")


def test_anthropic_thinking_and_unknown_blocks_are_ignored(anthropic) -> None:
    answer = anthropic_answer("Answer.", container=None)
    answer["content"][:0] = [{"type": "thinking", "thinking": "hmm", "signature": "x"}, "junk", {"type": "text", "text": 5}]
    assert anthropic_result(anthropic, answer).content == "Answer."


def test_anthropic_usage_counts_cache_tokens_and_tolerates_missing_usage(anthropic) -> None:
    answer = anthropic_answer("ok")
    answer["usage"] = {"input_tokens": 10, "output_tokens": 4, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 50}
    assert anthropic_result(anthropic, answer).usage == Usage(160, 4)
    assert anthropic_result(anthropic, anthropic_answer("ok", usage=None)).usage == Usage(None, None)


def test_anthropic_tool_use_with_non_object_input_gets_an_argument_error(anthropic) -> None:
    answer = anthropic_answer(None, [("toolu_1", "get_weather", ["Paris"]), ("toolu_2", "get_weather", None),
                                     ("toolu_3", "get_weather", "Paris"), ("toolu_4", "get_weather", '{"city": "Rome"}')])
    first, second, third, fourth = anthropic_result(anthropic, answer).tool_calls
    assert first.arguments == {} and first.argument_error == "tool arguments must be a JSON object, got an array"
    assert second.arguments == {} and second.argument_error is None
    assert third.arguments == {} and third.argument_error.startswith("tool arguments are not valid JSON")
    assert fourth.arguments == {"city": "Rome"} and fourth.argument_error is None  # a proxy that stringified it


def test_anthropic_missing_and_duplicate_ids_are_made_unique(anthropic) -> None:
    answer = anthropic_answer(None, [("toolu_1", "a", {}), ("toolu_1", "b", {}), {"type": "tool_use", "name": "c", "input": {}}])
    assert [c.id for c in anthropic_result(anthropic, answer).tool_calls] == ["toolu_1", "toolu_1_1", "call_2"]


@pytest.mark.parametrize("answer", [anthropic_answer("x", content=...), anthropic_answer("x", content="text"),
                                    Reply(200, b'"a string"')],
                         ids=["no-content", "content-not-a-list", "not-an-object"])
def test_anthropic_answers_without_content_are_provider_errors(anthropic, answer) -> None:
    anthropic.script(answer)
    with pytest.raises(ProviderError, match=r"^inference error \(anthropic\): the answer"):
        ant(anthropic).chat(ask(*HELLO))


def test_anthropic_overloaded_and_html_errors(anthropic) -> None:
    anthropic.script(Reply(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
                     Reply(502, HTML_502))
    with pytest.raises(ProviderError) as caught:
        ant(anthropic).chat(ask(*HELLO))
    assert (caught.value.status, str(caught.value)) == (529, "inference error (anthropic): 529: overloaded_error: Overloaded")
    with pytest.raises(ProviderError, match=r"^inference error \(anthropic\): 502: <html> <head><title>502 Bad Gateway"):
        ant(anthropic).chat(ask(*HELLO))


def test_anthropic_base_url_with_v1(anthropic) -> None:
    anthropic.script(anthropic_answer("ok"))
    AnthropicProvider(ANTHROPIC_KEY, base_url=anthropic.url + "/v1/").chat(ask(*HELLO))
    assert [r.path for r in anthropic.all_requests] == ["/v1/messages"]


# =========================================================================================== helpers


def test_unique_call_ids_scheme() -> None:
    assert unique_call_ids(["a", "b"]) == ["a", "b"]
    assert unique_call_ids(["a", "a", "a"]) == ["a", "a_1", "a_2"]
    assert unique_call_ids([None, None]) == ["call_0", "call_1"]
    assert unique_call_ids(["x_1", "x", "x"]) == ["x_1", "x", "x_2"]
    assert unique_call_ids(["a_1", "a", "a", "a_1"]) == ["a_1", "a", "a_2", "a_1_3"]
    assert unique_call_ids([None, "call_0"]) == ["call_0_2", "call_0"]
    assert unique_call_ids([True, {}, 3]) == ["call_0", "call_1", "3"]


def test_parse_arguments_never_raises() -> None:
    for value in ["{", "}", "[]", "{\"a\":", "\x00", 1.5, [1], object.__name__, '"\\ud800"', "NaN", "1e999"]:
        arguments, _, _ = parse_arguments(value)
        assert arguments == {}


def test_repair_leaves_a_well_formed_conversation_alone() -> None:
    history = (*HELLO, Message("assistant", tool_calls=(call("a"), call("b"))), Message("tool", "1", tool_call_id="b"),
               Message("tool", "2", tool_call_id="a"), Message("assistant", "done"), Message("user", "ok"))
    assert repair_tool_pairing(history) == history


def test_a_key_at_the_cut_of_a_long_error_body_leaves_no_prefix(llamacpp) -> None:
    key = "sk-straddle-0123456789abcdefghij"
    llamacpp.script(lambda body: Reply(500, "x" * 195 + llamacpp.last.header("Authorization").removeprefix("Bearer ") + "y" * 50))
    with pytest.raises(ProviderError) as caught:
        OpenAICompatibleProvider(llamacpp.url, key).chat(ask(*HELLO))
    assert caught.value.status == 500 and llamacpp.rejections == []
    assert "sk-st" not in str(caught.value) and str(caught.value).endswith("x[reda...")

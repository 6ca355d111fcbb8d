"""Error answers that mean something to the caller: a context overflow (with the server's numbers) or a
configuration no retry can fix; over loopback servers answering the way llama.cpp, OpenAI and Anthropic do."""

from __future__ import annotations

import json

import pytest

from automaton_min.inference.anthropic import AnthropicProvider
from automaton_min.inference.refusals import context_overflow
from automaton_min.inference.openai_compat import OpenAICompatibleProvider
from automaton_min.inference.types import ChatRequest, ContextTooLong, Message, ModelUnusable, ProviderError
from standins.loopback_http import Reply
from standins.model_servers import AnthropicServer, OpenAIServer

HELLO = (Message("system", "You are ada."), Message("user", "Hello"))
ANTHROPIC_KEY = "sk-ant-standin-key-0001"

LLAMACPP_OVERFLOW = Reply(400, {"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 4476, "n_ctx": 4096,
                                          "message": "request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it"}})
LLAMACPP_OLD_OVERFLOW = Reply(400, {"error": {"code": 400, "type": "invalid_request_error",
                                              "message": "the request exceeds the available context size, try increasing it"}})
OPENAI_OVERFLOW = Reply(400, {"error": {"type": "invalid_request_error", "code": "context_length_exceeded", "param": "messages",
                                        "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens. Please reduce the length of the messages."}})
VLLM_OVERFLOW = Reply(400, {"object": "error", "type": "BadRequestError", "code": 400,
                            "message": "This model's maximum context length is 2048 tokens. However, you requested 2300 tokens (2044 in the messages, 256 in the completion)."})
VLLM_INPUT_OVERFLOW = Reply(400, {"object": "error", "type": "BadRequestError", "code": 400,
                                  "message": "This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. Please reduce the length of the input messages."})
VLLM_AT_LEAST_OVERFLOW = Reply(400, {"error": {"object": "error", "type": "BadRequestError", "code": 400, "param": None,
                                               "message": "This model's maximum context length is 4096 tokens. However, you requested 1024 output tokens and your prompt contains at least 3073 input tokens, for a total of at least 4097 tokens. Please reduce the length of the input prompt or the number of requested output tokens."}})
LLAMA_CPP_PYTHON_RAW = Reply(400, {"error": {"message": "Requested tokens (5573) exceed context window of 4096", "type": "invalid_request_error"}})


def chat(server: OpenAIServer, provider_name: str = "openai-compatible") -> None:
    OpenAICompatibleProvider(server.url, None, provider_name=provider_name).chat(ChatRequest("m", HELLO, 256, timeout_s=10))


@pytest.mark.parametrize(("answer", "prompt", "window"), [
    (LLAMACPP_OVERFLOW, 4476, 4096),
    (LLAMACPP_OLD_OVERFLOW, None, None),
    (OPENAI_OVERFLOW, 9100, 8192),
    (VLLM_OVERFLOW, 2044, 2048),  # the messages' count, not messages and completion together
    (VLLM_INPUT_OVERFLOW, 5000, 4096),
    (VLLM_AT_LEAST_OVERFLOW, 3073, 4096),
    (LLAMA_CPP_PYTHON_RAW, 5573, 4096),
])
def test_context_overflows_are_recognized_with_the_numbers_the_server_gave(answer, prompt, window) -> None:
    with OpenAIServer(mode="llamacpp") as server:
        server.script(answer)
        with pytest.raises(ContextTooLong) as caught:
            chat(server)
    assert (caught.value.prompt_tokens, caught.value.context_tokens, caught.value.status) == (prompt, window, 400)


def test_anthropic_prompt_too_long_is_a_context_overflow() -> None:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}}
    with AnthropicServer(api_key=ANTHROPIC_KEY) as server:
        server.script(Reply(400, body))
        with pytest.raises(ContextTooLong) as caught:
            AnthropicProvider(ANTHROPIC_KEY, base_url=server.url).chat(ChatRequest("claude-x", HELLO, 256, timeout_s=10))
    assert (caught.value.prompt_tokens, caught.value.context_tokens) == (210_000, 200_000)


def test_other_400s_are_ordinary_provider_errors() -> None:
    with OpenAIServer(mode="llamacpp") as server:
        server.script(Reply(400, {"error": {"message": "bad request", "type": "invalid_request_error"}}))
        with pytest.raises(ProviderError) as caught:
            chat(server)
    assert not isinstance(caught.value, (ContextTooLong, ModelUnusable))


@pytest.mark.parametrize(("status", "provider", "fix"), [
    (404, "ollama", "ollama pull"),
    (404, "openai-compatible", "set inferenceModel to a model your server has, or correct openaiBaseUrl"),
    (401, "conway", "automaton-min provision"),
    (403, "openai", "set openaiApiKey"),
])
def test_refusals_no_retry_can_fix_are_configuration_errors_with_the_fix(status, provider, fix) -> None:
    with OpenAIServer(mode="llamacpp") as server:
        server.script(Reply(status, {"error": {"message": 'model "tiny" not found, try pulling it first'}}))
        with pytest.raises(ModelUnusable) as caught:
            chat(server, provider)
    assert caught.value.exit_code == 2 and caught.value.status == status
    assert fix in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_passing_failures_stay_runtime_failures(status) -> None:
    with OpenAIServer(mode="llamacpp") as server:
        server.script(Reply(status, {"error": {"message": "busy"}}))
        with pytest.raises(ProviderError) as caught:
            chat(server)
    assert not isinstance(caught.value, ModelUnusable) and caught.value.exit_code == 1


@pytest.mark.parametrize("window", [1, 511, 10**20])
def test_a_window_no_model_has_is_not_learnt(window) -> None:
    body = json.dumps({"error": {"code": 400, "message": "the request exceeds the available context size",
                                 "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": window}})
    assert context_overflow(400, body.encode()) == (5000, None)

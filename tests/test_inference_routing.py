"""Provider resolution and the router end to end over real loopback model servers."""

from __future__ import annotations

import pytest

from automaton_min.config import DEFAULTS, deep_merge
from automaton_min.inference.providers import Providers
from automaton_min.inference.registry import ModelInfo, ModelRegistry
from automaton_min.inference.router import Router, RoutedResult
from automaton_min.inference.types import InferenceError, Message, ToolSchema
from automaton_min.net.http import request
from automaton_min.net.resilient import CircuitBreaker, ResilientHttp
from standins.loopback_http import Reply
from standins.model_servers import AnthropicServer, OpenAIServer, anthropic_answer, openai_answer

ANTHROPIC_KEY = "sk-ant-standin-key-0001"
MESSAGES = (Message("system", "You are an automaton."), Message("user", "What is 2+2?"))
EXEC = ToolSchema("exec", "Run a shell command.", {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})


def plain(service: str):
    return request


def config(**values) -> dict:
    return deep_merge(DEFAULTS, values)


@pytest.mark.parametrize(("values", "model", "kind"), [
    ({"ollamaBaseUrl": "http://127.0.0.1:11434", "conwayApiKey": "k"}, ModelInfo("llama3.2", "ollama", "L"), "ollama"),
    ({"anthropicApiKey": ANTHROPIC_KEY}, ModelInfo("claude-sonnet-4-5", "conway", "C"), "anthropic"),
    ({"openaiBaseUrl": "http://127.0.0.1:8080"}, ModelInfo("gemma", "openai-compatible", "G"), "compatible"),
    ({"openaiBaseUrl": "http://127.0.0.1:8080", "openaiApiKey": "sk-x"}, ModelInfo("gpt-5.2", "openai", "G"), "openai"),
    ({"openaiApiKey": "sk-x"}, ModelInfo("gpt-5.2", "openai", "G"), "openai"),
    ({"conwayApiKey": "cnwy_k"}, ModelInfo("gpt-5.2", "openai", "G"), "conway"),
])
def test_models_resolve_to_the_expected_provider(values: dict, model: ModelInfo, kind: str) -> None:
    assert Providers(config(**values), plain).kind_for(model) == kind


def test_no_provider_is_an_error_that_says_what_to_set() -> None:
    with pytest.raises(InferenceError, match="provision"):
        Providers(config(), plain).kind_for(ModelInfo("gpt-5.2", "openai", "G"))


def routed(db, clock, cfg: dict, send_for=plain) -> Router:
    registry = ModelRegistry(db, clock)
    registry.seed_baseline()
    return Router(db, registry, cfg, Providers(cfg, send_for), session_id="s", now=clock)


def test_llamacpp_style_server_end_to_end_records_the_reported_usage(db, clock) -> None:
    with OpenAIServer(mode="llamacpp") as server:
        server.script(openai_answer(None, [("call_0", "exec", '{"command": "ls"}')], usage=(321, 45)))
        cfg = config(inferenceModel="gemma-3-270m", openaiBaseUrl=server.url)
        result = routed(db, clock, cfg).route(MESSAGES, tier="normal", turn_id="turn-1", tools=(EXEC,))
    assert isinstance(result, RoutedResult)
    assert [(c.name, c.arguments) for c in result.result.tool_calls] == [("exec", {"command": "ls"})]
    assert server.rejections == []
    sent = server.requests[0].body
    assert sent["model"] == "gemma-3-270m" and sent["max_tokens"] == 4096 and sent["tools"][0]["function"]["name"] == "exec"
    assert db.query("SELECT turn_id, model, provider, input_tokens, output_tokens, cost_cents FROM inference_costs") == [
        ("turn-1", "gemma-3-270m", "openai-compatible", 321, 45, 0)]


def test_conway_proxy_gets_the_raw_key_and_baseline_prices(db, clock) -> None:
    with OpenAIServer(mode="openai", api_key="cnwy_k_standin", auth_style="raw") as server:
        server.script(openai_answer("4", usage=(10_000, 1_000)))
        cfg = config(conwayApiUrl=server.url, conwayApiKey="cnwy_k_standin")
        result = routed(db, clock, cfg).route(MESSAGES, tier="normal", turn_id="turn-2")
    assert result.result.content == "4" and server.rejections == []
    assert server.requests[0].body["max_completion_tokens"] == 4096
    assert result.cost_cents == 4  # ceil((10000*18 + 1000*140) / 100000) = ceil(3.2)


def test_anthropic_end_to_end(db, clock) -> None:
    with AnthropicServer(api_key=ANTHROPIC_KEY) as server:
        def to_standin(service: str):  # stands where api.anthropic.com would be
            return lambda method, url, **kw: request(method, url.replace("https://api.anthropic.com", server.url), **kw)

        server.script(anthropic_answer("4", usage=(50, 2)))
        cfg = config(inferenceModel="claude-haiku-4-5", anthropicApiKey=ANTHROPIC_KEY)
        result = routed(db, clock, cfg, to_standin).route(MESSAGES, tier="normal", turn_id="turn-3")
    assert result.result.content == "4" and server.rejections == []
    assert (result.input_tokens, result.output_tokens) == (50, 2)
    assert server.requests[0].header("x-api-key") == ANTHROPIC_KEY


def test_chat_calls_carry_one_idempotency_key_so_5xx_is_retried(db, clock) -> None:
    waits: list[float] = []

    def send_for(service: str):
        client = ResilientHttp(service, breaker=CircuitBreaker(service=service), sleep=waits.append)
        from automaton_min.inference.providers import new_ulid as make_key

        def send(method, url, **kwargs):
            return client.request(method, url, idempotency_key=make_key(clock()), **kwargs)
        return send

    with OpenAIServer(mode="llamacpp") as server:
        server.script(Reply(503, {"error": "loading model"}), openai_answer("ok"))
        cfg = config(inferenceModel="gemma", openaiBaseUrl=server.url)
        result = routed(db, clock, cfg, send_for).route(MESSAGES, tier="normal", turn_id="t")
    assert result.result.content == "ok" and len(waits) == 1
    keys = [r.headers.get("Idempotency-Key") for r in server.all_requests]
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1]

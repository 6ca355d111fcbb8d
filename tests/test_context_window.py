"""How much context a model gets: from config, from the local server (llama.cpp /props, vLLM /v1/models, Ollama
/api/show), from an earlier refusal, from the registry; and what a context overflow does: the window learnt and kept,
a smaller budget, and one retry in the same turn, rebuilt for that window."""

from __future__ import annotations

import json

import orjson
import pytest

from automaton_min.agent.stepwise import CHOOSE
from automaton_min.config import DEFAULTS, deep_merge, load_config
from automaton_min.errors import ConfigError
from automaton_min.inference.providers import Providers
from automaton_min.inference.registry import ModelRegistry
from automaton_min.inference.router import Router
from automaton_min.inference.types import ContextTooLong, Message
from automaton_min.net.http import request
from automaton_min.runtime.agent_runtime import build_agent
from conftest import CREATOR, keep_offline
from standins.loopback_http import Reply
from standins.model_servers import OpenAIServer, openai_answer

LLAMACPP_PROPS = {"default_generation_settings": {"id": 0, "n_ctx": 8192, "params": {"n_predict": -1}}, "total_slots": 1,
                  "model_path": "/models/gemma-3-270m-q4_k_m.gguf"}


def ollama_show(trained: int, parameters: str = "stop \"<end_of_turn>\"") -> dict:
    return {"modelfile": "FROM gemma3", "parameters": parameters, "template": "{{ .Prompt }}",
            "details": {"format": "gguf", "family": "gemma3"},
            "model_info": {"general.architecture": "gemma3", "gemma3.context_length": trained, "gemma3.embedding_length": 640}}


def router_for(db, clock, **values) -> Router:
    cfg = deep_merge(DEFAULTS, values)
    registry = ModelRegistry(db, clock)
    registry.seed_baseline()
    providers = Providers(cfg, lambda service: request)
    return Router(db, registry, cfg, providers, session_id="s", now=clock, describe=providers.context_window)


def test_llamacpp_props_give_the_window_of_an_unknown_model(db, clock) -> None:
    with OpenAIServer(mode="llamacpp", props=LLAMACPP_PROPS) as server:
        router = router_for(db, clock, inferenceModel="gemma-3-270m", openaiBaseUrl=server.url + "/v1")
        first, second = router.plan("normal"), router.plan("normal")
        asked = [r.path for r in server.all_requests]
    # a Gemma window keeps its 10% safety margin (our counts are cl100k's, not its tokenizer's)
    assert first.model.context_window == 8192 and first.max_tokens == 2048 and first.context_budget == 8192 - 820 - 2048
    assert second == first and asked == ["/props"]  # asked once, remembered
    assert first.model.free  # a local server costs nothing


def test_llamacpp_top_level_n_ctx_is_read_too(db, clock) -> None:
    with OpenAIServer(mode="llamacpp", props={"n_ctx": 4096}) as server:
        route = router_for(db, clock, inferenceModel="gemma", openaiBaseUrl=server.url).plan("normal")
    assert (route.model.context_window, route.max_tokens, route.context_budget) == (4096, 1024, 4096 - 410 - 1024)


@pytest.mark.parametrize(("parameters", "window"), [
    ("num_ctx 16384\nstop \"<end_of_turn>\"", 16384),   # the Modelfile sets it: what Ollama runs with
    ("stop \"<end_of_turn>\"", 4096),                   # only the trained length (32768): Ollama's small default
])
def test_ollama_show_gives_the_window(db, clock, parameters: str, window: int) -> None:
    with OpenAIServer(mode="ollama", show={"gemma3:270m": ollama_show(32768, parameters)}) as server:
        route = router_for(db, clock, inferenceModel="gemma3:270m", ollamaBaseUrl=server.url).plan("normal")
        [asked] = [r for r in server.all_requests if r.path == "/api/show"]
    assert route.model.context_window == window and route.model.provider == "ollama"
    assert asked.json() == {"model": "gemma3:270m"}


def test_ollama_behind_openai_base_url_is_asked_after_props(db, clock) -> None:
    with OpenAIServer(mode="ollama", show={"qwen3:0.6b": ollama_show(40960, "num_ctx 2048")}) as server:
        route = router_for(db, clock, inferenceModel="qwen3:0.6b", openaiBaseUrl=server.url + "/v1").plan("normal")
        asked = [r.path for r in server.all_requests]
    assert route.model.context_window == 2048 and asked == ["/props", "/v1/models", "/api/show"]


def test_vllm_max_model_len_gives_the_window_and_the_key_goes_with_the_question(db, clock) -> None:
    entry = {"id": "Qwen/Qwen3-0.6B", "object": "model", "owned_by": "vllm", "root": "Qwen/Qwen3-0.6B", "max_model_len": 4096}
    with OpenAIServer(api_key="vllm-key", models=[{"id": "other", "max_model_len": 32768}, entry]) as server:
        router = router_for(db, clock, inferenceModel="Qwen/Qwen3-0.6B", openaiBaseUrl=server.url + "/v1",
                            openaiApiKey="vllm-key")
        route = router.plan("normal")
        [listing] = [r for r in server.all_requests if r.path == "/v1/models"]
    assert route.model.context_window == 4096 and route.max_tokens == 1024
    assert listing.headers.get("Authorization") == "Bearer vllm-key"
    assert "vLLM's max_model_len" in router.window(route.model).source


def test_config_window_wins_and_a_silent_server_leaves_the_registry_default(db, clock) -> None:
    with OpenAIServer(mode="llamacpp", props=LLAMACPP_PROPS) as server:
        configured = router_for(db, clock, inferenceModel="gemma", openaiBaseUrl=server.url,
                                modelStrategy={"contextWindow": 32768}).plan("normal")
        assert server.all_requests == []
    assert configured.model.context_window == 32768
    with OpenAIServer(mode="llamacpp") as silent:  # no /props, no /api/show (llama-cpp-python, vLLM)
        route = router_for(db, clock, inferenceModel="gemma", openaiBaseUrl=silent.url).plan("normal")
    assert route.model.context_window == 128_000


def test_an_unreachable_server_is_asked_again_later(db, clock) -> None:
    with OpenAIServer(mode="llamacpp", props=LLAMACPP_PROPS) as server:
        url = server.url
    router = router_for(db, clock, inferenceModel="gemma", openaiBaseUrl=url)
    assert router.plan("normal").model.context_window == 128_000  # nobody answered: not remembered
    assert router.describe(router.plan("normal").model) is None


def test_unknown_models_cost_what_config_says(db, clock) -> None:
    route = router_for(db, clock, inferenceModel="mystery", conwayApiKey="cnwy_k",
                       modelStrategy={"inputCostPer1k": 30, "outputCostPer1k": 120}).plan("normal")
    assert (route.model.provider, route.model.cost_per_1k_input, route.model.cost_per_1k_output) == ("conway", 30, 120)


@pytest.mark.parametrize(("key", "value"), [("contextWindow", -1), ("contextWindow", "8k"), ("inputCostPer1k", 1.5)])
def test_the_new_strategy_keys_are_validated(home, key: str, value) -> None:
    home.ensure()
    home.config_path.write_bytes(orjson.dumps({"name": "ada", "modelStrategy": {key: value}}))
    with pytest.raises(ConfigError, match=f"modelStrategy.{key}: expected a whole number"):
        load_config(home, {})


# --------------------------------------------------------------------------- overflow


def test_an_overflow_shrinks_the_budget_from_the_servers_numbers_and_it_is_remembered(db, clock) -> None:
    router = router_for(db, clock, inferenceModel="gemma", openaiBaseUrl="http://127.0.0.1:9")
    route = router.plan("normal")
    sent = (Message("system", "s" * 20_000), Message("user", "u" * 20_000))  # 20,000 tokens (cl100k)
    error = ContextTooLong("too long", prompt_tokens=24_000, context_tokens=8192)
    smaller = router.shrink_context(route, error, sent)
    # 90% of (8192 - 2048) / 24000 of the 20,000 tokens sent (+1 for the empty tool list, "[]")
    assert smaller.max_tokens == 2048 and smaller.context_budget == 20_001 * 6144 * 9 // (24_000 * 10)
    later = router.plan("normal")
    assert later.context_budget == smaller.context_budget and later.model.context_window == 8192


def test_a_window_named_in_a_refusal_is_kept_for_the_next_run_unless_the_server_says_one(db, clock) -> None:
    first = router_for(db, clock, inferenceModel="gemma", openaiBaseUrl="http://127.0.0.1:9")
    first.shrink_context(first.plan("normal"), ContextTooLong("too long", prompt_tokens=5000, context_tokens=4096),
                         (Message("user", "u" * 8000),))
    later = router_for(db, clock, inferenceModel="gemma", openaiBaseUrl="http://127.0.0.1:9")  # a restart
    route = later.plan("normal")
    assert (route.model.context_window, route.max_tokens) == (4096, 1024)
    assert later.window(route.model).source.startswith("the server's refusal of a longer prompt (at 2026-11-22")
    with OpenAIServer(mode="llamacpp", props=LLAMACPP_PROPS) as server:  # restarted with 8,192: it says so
        told = router_for(db, clock, inferenceModel="gemma", openaiBaseUrl=server.url).plan("normal")
    assert told.model.context_window == 8192


def test_an_overflow_without_numbers_halves_what_was_sent(db, clock) -> None:
    router = router_for(db, clock, inferenceModel="gemma", openaiBaseUrl="http://127.0.0.1:9")
    route = router.plan("normal")
    smaller = router.shrink_context(route, ContextTooLong("too long"), (Message("user", "u" * 4000),))  # 2,000 tokens
    assert smaller.context_budget == 1000 and router.plan("normal").context_budget == 1000


def test_the_loop_retries_an_overflowing_turn_once_with_less_context(cli, home, clock) -> None:
    overflow = Reply(400, {"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 9000, "n_ctx": 4096,
                                     "message": "request (9000 tokens) exceeds the available context size (4096 tokens), try increasing it"}})
    with OpenAIServer(mode="llamacpp") as model:
        model.script(*(openai_answer(None, [("call_0", "write_file", json.dumps({"path": f"n{i}.md", "content": "x" * 4000}))])
                       for i in range(3)), overflow, openai_answer("ok"), openai_answer("still ok"))
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Write notes.", "--creator-address", CREATOR,
                    "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
        assert setup.code == 0, setup.stderr
        agent = build_agent(home, load_config(home, {}), now=clock)
        try:
            first = agent.loop.run_cycle("test")
            second = agent.loop.run_cycle("test")
            sizes = [len(r.body["messages"]) for r in model.requests]
            stored = agent.db.scalar("SELECT COUNT(*) FROM turns")
        finally:
            agent.sandbox.close()
            agent.db.close()
    assert model.rejections == [] and len(sizes) == 6
    assert first.turns == 4 and stored == 5 and "error" not in first.reason  # no failed turn, no error sleep
    assert sizes[4] < sizes[3]  # the same turn, retried with less history
    assert sizes[5] <= sizes[4] + 2 and second.turns == 1  # remembered: the next cycle starts small


def llama_cpp_python(window: int, answer: dict, refused: list[int]):
    """llama-cpp-python's server started with ``--n_ctx window`` (it has no /props): a request whose prompt and
    completion do not fit is refused in its words, with its numbers (its prompt counted as a quarter of the JSON
    bytes of the messages and tools) and its size noted in ``refused``; one that fits gets ``answer``."""
    def reply(body: dict) -> dict | Reply:
        prompt, completion = len(orjson.dumps([body["messages"], body.get("tools")])) // 4, body["max_tokens"]
        if prompt + completion <= window:
            return answer
        refused.append(prompt + completion)
        return Reply(400, {"error": {"type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
                                     "message": f"This model's maximum context length is {window} tokens. However, you "
                                                f"requested {prompt + completion} tokens ({prompt} in the messages, "
                                                f"{completion} in the completion). Please reduce the length of the "
                                                "messages or completion."}})
    return reply


def one_cycle(home, clock):
    """One wake cycle of the real agent built for ``home`` (``build_agent``), closed afterwards."""
    agent = build_agent(home, load_config(home, {}), now=clock)
    try:
        return agent.loop.run_cycle("test")
    finally:
        agent.sandbox.close()
        agent.db.close()


def test_a_context_refusal_is_learnt_and_the_same_turn_succeeds_with_no_last_error(cli, home, clock) -> None:
    haiku = openai_answer(None, [("call_0", "write_file", json.dumps({"path": "haiku.txt", "content": "waves fold on grey sand"}))])
    sleep = openai_answer(None, [("call_0", "sleep", json.dumps({"duration_seconds": 600, "reason": "the haiku is written"}))])
    refused: list[int] = []
    with OpenAIServer(mode="llamacpp") as model:
        # a refusal, the same turn again, the sleep; after the restart, the sleep
        model.script(*(llama_cpp_python(4096, answer, refused) for answer in (haiku, haiku, sleep, sleep)))
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Write a haiku about the sea into haiku.txt, then sleep.",
                    "--creator-address", CREATOR, "--openai-base-url", model.url + "/v1", "--inference-model", "gemma-3-270m",
                    "--yes")
        assert setup.code == 0, setup.stderr
        keep_offline(home)
        for turns in (2, 1):  # a run, then a restart
            cycle = one_cycle(home, clock)
            assert cycle.turns == turns and cycle.reason == "the haiku is written"
            clock.advance(601_000)
        sent = [len(orjson.dumps(r.body)) for r in model.requests]
        restart = model.requests[3].body
    status = json.loads(cli("status", "--json").stdout)
    assert len(sent) == 4 and len(refused) == 1  # refused once, then accepted in the same turn; after the restart it fits
    assert model.rejections == []
    assert sent[1] < sent[0] * 0.6  # rebuilt for 4,096 tokens: a small model's first step
    # kept: after the restart the first request is already a small model's first step (agent/stepwise.py)
    assert [t["function"]["name"] for t in restart["tools"]] == [CHOOSE] == [
        t["function"]["name"] for t in model.requests[1].body["tools"]]
    assert (home.root / "workspace" / "haiku.txt").read_text() == "waves fold on grey sand"
    assert status["lastError"] is None


def test_the_running_agent_reads_vllms_window_before_its_first_request(cli, home, clock) -> None:
    sleep = openai_answer(None, [("call_0", "sleep", json.dumps({"duration_seconds": 600, "reason": "nothing to do"}))])
    with OpenAIServer(models=[{"id": "Qwen/Qwen3-0.6B", "object": "model", "max_model_len": 4096}]) as model:
        model.script(sleep)
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Keep notes.", "--creator-address", CREATOR,
                    "--openai-base-url", model.url + "/v1", "--inference-model", "Qwen/Qwen3-0.6B", "--yes")
        assert setup.code == 0, setup.stderr
        keep_offline(home)
        cycle = one_cycle(home, clock)
        [first] = model.requests
    assert cycle.turns == 1 and model.rejections == []
    # the window was read before the first request: already a small model's first step, and it fits
    assert first.body["tools"][0]["function"]["name"] == CHOOSE and len(orjson.dumps(first.body)) // 4 + 1024 <= 4096

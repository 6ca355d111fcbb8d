"""Model registry and router: model choice per tier, budgets at their boundaries, exact costs, recording."""

from __future__ import annotations

import base64
import hashlib
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automaton_min.config import DEFAULTS, deep_merge
from automaton_min.inference.registry import BASELINE, ModelInfo, ModelRegistry
from automaton_min.inference.router import (
    CONTEXT_BUDGET,
    BudgetDenied,
    Router,
    RoutedResult,
    COUNT_BAND,
    cost_cents,
    prompt_tokens,
    prune_inference_costs,
)
from automaton_min.inference.types import ChatResult, Message, Usage
from automaton_min.memory.tokens import ESTIMATE_ERROR_BOUND, count_tokens
from automaton_min.treasury.spend import SpendTracker
from standins.loopback_http import LoopbackServer, Reply

GPT52 = next(m for m in BASELINE if m.model_id == "gpt-5.2")
MESSAGES = (Message("system", "You are an automaton."), Message("user", "Check your balance."))


@pytest.fixture
def registry(db, clock) -> ModelRegistry:
    reg = ModelRegistry(db, clock)
    reg.seed_baseline()
    return reg


class ScriptedChat:
    """The router's provider hook: records each call and answers with a scripted usage."""

    def __init__(self, usage: Usage = Usage(1000, 200)) -> None:
        self.usage, self.calls = usage, []

    def __call__(self, model: ModelInfo, request) -> ChatResult:
        self.calls.append((model.model_id, request))
        return ChatResult("ok", usage=self.usage, model=model.model_id, provider=model.provider)


def router(db, registry, clock, chat=None, **config) -> Router:
    merged = deep_merge(DEFAULTS, config)
    return Router(db, registry, merged, chat or ScriptedChat(), session_id="session-1", now=clock, monotonic=lambda: 0.0)


# --------------------------------------------------------------------------- registry


def test_baseline_is_seeded_with_reference_prices(registry: ModelRegistry) -> None:
    assert {m.model_id for m in registry.all()} == {m.model_id for m in BASELINE}
    assert (GPT52.cost_per_1k_input, GPT52.cost_per_1k_output, GPT52.parameter_style) == (18, 140, "max_completion_tokens")
    assert registry.get("gpt-4.1-nano").tier_minimum == "critical"


def test_reseeding_keeps_enabled_flags_and_other_models(registry: ModelRegistry) -> None:
    registry.set_enabled("gpt-5.2", False)
    registry.upsert(ModelInfo("llama-local", "openai-compatible", "Llama", "critical"))
    registry.seed_baseline()
    assert registry.get("gpt-5.2").enabled is False
    assert registry.get("llama-local").enabled is True


def test_available_filters_by_tier_and_sorts_cheapest_first(registry: ModelRegistry) -> None:
    assert [m.model_id for m in registry.available("critical")] == ["gpt-4.1-nano"]
    low = [m.model_id for m in registry.available("low_compute")]
    assert low == ["gpt-4.1-nano", "gpt-4.1-mini", "gpt-5-mini"]
    assert len(registry.available("high")) == len(BASELINE)


def test_refresh_from_api_converts_prices_and_skips_unavailable(registry: ModelRegistry) -> None:
    count = registry.refresh_from_api([
        {"id": "claude-x", "owned_by": "anthropic", "pricing": {"input_per_million": 3.0, "output_per_million": 15.0}},
        {"id": "gone", "available": False},
        {"id": "gpt-5.2", "pricing": {"input_per_1m_tokens_usd": 1.75, "output_per_1m_tokens_usd": 14}},
    ])
    assert count == 2 and registry.get("gone") is None
    claude = registry.get("claude-x")
    assert (claude.provider, claude.cost_per_1k_input, claude.cost_per_1k_output, claude.enabled) == ("anthropic", 30, 150, True)
    assert (registry.get("gpt-5.2").cost_per_1k_input, registry.get("gpt-5.2").cost_per_1k_output) == (18, 140)
    registry.seed_baseline()
    assert registry.get("claude-x").enabled is True  # never disabled by re-seeding


def test_ollama_discovery(registry: ModelRegistry) -> None:
    tags = {"models": [{"name": "llama3.2:latest"}, {"model": "qwen2.5:1.5b"}, {"size": 1}]}
    with LoopbackServer({("GET", "/api/tags"): lambda r: Reply(200, tags)}) as server:
        assert registry.discover_ollama(server.url + "/") == 2
    llama = registry.get("llama3.2:latest")
    assert (llama.provider, llama.display_name, llama.tier_minimum, llama.free, llama.context_window) == ("ollama", "Llama3.2", "critical", True, 8192)
    assert registry.get("qwen2.5:1.5b").display_name == "Qwen2.5 (1.5b)"
    with LoopbackServer({("GET", "/api/tags"): lambda r: Reply(500, "down")}) as server:
        assert registry.discover_ollama(server.url) == 0


# --------------------------------------------------------------------------- choosing


def test_the_configured_model_is_used_at_normal_and_high(db, registry, clock) -> None:
    r = router(db, registry, clock, inferenceModel="gpt-4.1")
    assert r.plan("normal").model.model_id == "gpt-4.1"
    assert r.plan("high").model.model_id == "gpt-4.1"


def test_an_unknown_configured_model_is_used_as_is(db, registry, clock) -> None:
    r = router(db, registry, clock, inferenceModel="gemma-3-270m", openaiBaseUrl="http://127.0.0.1:8080")
    route = r.plan("normal")
    assert (route.model.model_id, route.model.provider, route.model.free) == ("gemma-3-270m", "openai-compatible", True)


def test_lower_tiers_use_the_strategy_models_with_fewer_tokens_and_less_context(db, registry, clock) -> None:
    r = router(db, registry, clock, modelStrategy={"lowComputeModel": "gpt-4.1-mini", "criticalModel": "gpt-4.1-nano"})
    normal, low, critical = r.plan("normal"), r.plan("low_compute"), r.plan("critical")
    assert (low.model.model_id, critical.model.model_id) == ("gpt-4.1-mini", "gpt-4.1-nano")
    assert normal.max_tokens == 4096 and critical.max_tokens == 2048
    assert normal.context_budget > low.context_budget > critical.context_budget
    assert r.plan("high", low_compute=True).model.model_id == "gpt-4.1-mini"


def test_dead_tier_and_disallowed_tasks_are_denied(db, registry, clock) -> None:
    r = router(db, registry, clock)
    assert isinstance(r.plan("dead"), BudgetDenied) and r.plan("dead").limit == "tier"
    assert r.plan("critical", "summarization").limit == "tier"


def test_a_disabled_choice_falls_back_to_the_cheapest_allowed(db, registry, clock) -> None:
    registry.set_enabled("gpt-5.2", False)
    assert router(db, registry, clock).plan("normal").model.model_id == "gpt-4.1-nano"
    registry.set_enabled("gpt-4.1-nano", False)
    registry.set_enabled("gpt-5-mini", False)
    assert router(db, registry, clock).plan("critical").limit == "model"


def test_max_tokens_per_turn_caps_agent_turns(db, registry, clock) -> None:
    r = router(db, registry, clock, maxTokensPerTurn=1000)
    assert r.plan("high").max_tokens == 1000
    assert r.plan("high", "planning").max_tokens == 8192


# --------------------------------------------------------------------------- cost


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10**7), st.integers(0, 10**7), st.integers(0, 10**5), st.integers(0, 10**5))
def test_cost_is_usage_times_price_rounded_up_exactly(inp: int, out: int, price_in: int, price_out: int) -> None:
    model = ModelInfo("m", "p", "m", cost_per_1k_input=price_in, cost_per_1k_output=price_out)
    exact = Fraction(inp, 1000) * Fraction(price_in, 100) + Fraction(out, 1000) * Fraction(price_out, 100)
    assert cost_cents(model, inp, out) == -(-exact.numerator // exact.denominator)


def test_a_call_records_its_real_cost_with_the_turn_id(db, registry, clock) -> None:
    chat = ScriptedChat(Usage(1234, 567))
    result = router(db, registry, clock, chat).route(MESSAGES, tier="normal", turn_id="turn-42")
    assert isinstance(result, RoutedResult) and result.usage_estimated is False
    assert result.cost_cents == 2  # ceil((1234*18 + 567*140) / 100000)
    assert chat.calls[0][1].max_tokens == 4096 and chat.calls[0][1].timeout_s == 120
    rows = db.query("SELECT session_id, turn_id, model, provider, input_tokens, output_tokens, cost_cents, tier, task_type FROM inference_costs")
    assert rows == [("session-1", "turn-42", "gpt-5.2", "openai", 1234, 567, 2, "normal", "agent_turn")]
    assert db.query("SELECT category, amount_cents FROM spend_tracking") == [("inference", 2)]


def test_missing_usage_is_estimated_and_flagged(db, registry, clock) -> None:
    result = router(db, registry, clock, ScriptedChat(Usage(None, None))).route(MESSAGES, tier="normal", turn_id="t")
    assert result.usage_estimated is True
    assert result.input_tokens == prompt_tokens(MESSAGES, (), count_tokens)


# --------------------------------------------------------------------------- budgets at their boundaries


def worst_case(r: Router, tier: str = "normal") -> int:
    route = r.plan(tier)
    return cost_cents(route.model, prompt_tokens(MESSAGES, (), count_tokens), route.max_tokens)


def test_per_call_ceiling(db, registry, clock) -> None:
    estimate = worst_case(router(db, registry, clock))
    allowed = router(db, registry, clock, modelStrategy={"perCallCeilingCents": estimate}).route(MESSAGES, tier="normal", turn_id="a")
    denied = router(db, registry, clock, modelStrategy={"perCallCeilingCents": estimate - 1}).route(MESSAGES, tier="normal", turn_id="b")
    assert isinstance(allowed, RoutedResult)
    assert isinstance(denied, BudgetDenied) and denied.limit == "perCallCeilingCents"


def test_the_ceiling_is_checked_on_the_real_token_count(db, registry, clock) -> None:
    blob = base64.b64encode(hashlib.shake_256(b"blob").digest(75_000)).decode()  # 100,000 characters
    messages = (Message("user", blob),)
    route = router(db, registry, clock).plan("normal")
    chars4 = cost_cents(route.model, len(blob) // 4 + 1, route.max_tokens)
    exact = cost_cents(route.model, prompt_tokens(messages, (), count_tokens), route.max_tokens)
    assert exact > chars4  # characters/4 would have let it through
    chat = ScriptedChat()
    denied = router(db, registry, clock, chat, modelStrategy={"perCallCeilingCents": chars4}).route(messages, tier="normal", turn_id="a")
    assert isinstance(denied, BudgetDenied) and denied.limit == "perCallCeilingCents" and chat.calls == []
    allowed = router(db, registry, clock, chat, modelStrategy={"perCallCeilingCents": exact}).route(messages, tier="normal", turn_id="b")
    assert isinstance(allowed, RoutedResult)


def test_the_count_band_covers_the_measured_estimate_error() -> None:
    assert COUNT_BAND >= max(ESTIMATE_ERROR_BOUND.values())


def test_hourly_budget(db, registry, clock) -> None:
    estimate = worst_case(router(db, registry, clock))
    SpendTracker(db, clock).record("inference", 100, "inference")
    chat = ScriptedChat()
    assert isinstance(router(db, registry, clock, chat, modelStrategy={"hourlyBudgetCents": 100 + estimate}).plan("normal").model, ModelInfo)
    denied = router(db, registry, clock, chat, modelStrategy={"hourlyBudgetCents": 100 + estimate - 1}).route(MESSAGES, tier="normal", turn_id="x")
    assert denied.limit == "hourlyBudgetCents" and chat.calls == []
    allowed = router(db, registry, clock, chat, modelStrategy={"hourlyBudgetCents": 100 + estimate}).route(MESSAGES, tier="normal", turn_id="y")
    assert isinstance(allowed, RoutedResult)


def test_session_budget_counts_only_this_session(db, registry, clock) -> None:
    estimate = worst_case(router(db, registry, clock))
    db.execute("INSERT INTO inference_costs (id, session_id, model, provider, cost_cents, tier, task_type, created_at)"
               " VALUES ('c1', 'session-1', 'm', 'p', 50, 'normal', 'agent_turn', '2026-11-22T10:00:00.000Z'),"
               " ('c2', 'other', 'm', 'p', 9999, 'normal', 'agent_turn', '2026-11-22T10:00:00.000Z')")
    assert router(db, registry, clock, modelStrategy={"sessionBudgetCents": 50 + estimate - 1}).route(
        MESSAGES, tier="normal", turn_id="x").limit == "sessionBudgetCents"
    assert isinstance(router(db, registry, clock, modelStrategy={"sessionBudgetCents": 50 + estimate}).route(
        MESSAGES, tier="normal", turn_id="y"), RoutedResult)


def test_daily_treasury_inference_budget(db, registry, clock) -> None:
    estimate = worst_case(router(db, registry, clock))
    policy = {**DEFAULTS["treasuryPolicy"], "maxInferenceDailyCents": 6 * estimate}  # hourly share = estimate
    assert isinstance(router(db, registry, clock, treasuryPolicy=policy).route(MESSAGES, tier="normal", turn_id="a"), RoutedResult)
    denied = router(db, registry, clock, treasuryPolicy=policy).route(MESSAGES, tier="normal", turn_id="b")
    assert isinstance(denied, BudgetDenied) and denied.limit == "maxInferenceDailyCents"


def test_context_budgets_shrink_with_the_tier() -> None:
    assert CONTEXT_BUDGET["normal"] > CONTEXT_BUDGET["low_compute"] > CONTEXT_BUDGET["critical"] > CONTEXT_BUDGET["dead"] == 0


def test_inference_cost_retention(db, registry, clock) -> None:
    r = router(db, registry, clock)
    r.route(MESSAGES, tier="normal", turn_id="old")
    clock.advance(100 * 86_400_000)
    r.route(MESSAGES, tier="normal", turn_id="new")
    assert prune_inference_costs(db, clock() - 90 * 86_400_000) == 1
    assert db.query("SELECT turn_id FROM inference_costs") == [("new",)]

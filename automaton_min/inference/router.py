"""The inference router: which model, how many tokens, whether the budget allows it, what it cost.

A model that does not use cl100k (Gemma, Llama, anything local, the o200k GPT models) keeps ``safety_margin`` of its
window unused, as our counts are not its tokenizer's. Cost is estimated only when the provider reports no usage; the
``inference_costs`` row and the ``spend_tracking`` entry are written in one transaction.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping

import orjson

from automaton_min.clock import Clock, HOUR_MS, system_now, to_iso
from automaton_min.ids import new_ulid
from automaton_min.inference.deadline import call_with_deadline
from automaton_min.inference.registry import ModelInfo, ModelRegistry
from automaton_min.inference.types import (ChatRequest, ChatResult, ContextTooLong, Message, ModelUnusable,
                                          ProviderError, ToolSchema)
from automaton_min.inference.windows import ASSUMED, CONFIGURED, REFUSED, REGISTRY, LearnedWindows, Window
from automaton_min.memory.tokens import EXACT_BAND, count_tokens, estimate_tokens, safety_margin
from automaton_min.log import get_logger
from automaton_min.observe.metrics import NO_METRICS, Metrics
from automaton_min.tiers import TIER_RANK
from automaton_min.treasury.money_out import inference_refusal
from automaton_min.treasury.spend import SpendTracker

if TYPE_CHECKING:
    from automaton_min.store.db import Database

log = get_logger(__name__)

TASK_TIMEOUTS_S = {"heartbeat_triage": 15, "safety_check": 30, "summarization": 60, "agent_turn": 120, "planning": 120}

# Output-token limit per tier and task (None: that task does not run at that tier).
MAX_TOKENS: dict[str, dict[str, int | None]] = {
    "high": {"agent_turn": 8192, "heartbeat_triage": 2048, "safety_check": 4096, "summarization": 4096,
             "planning": 8192},
    "normal": {"agent_turn": 4096, "heartbeat_triage": 2048, "safety_check": 4096, "summarization": 4096,
               "planning": 4096},
    "low_compute": {"agent_turn": 4096, "heartbeat_triage": 1024, "safety_check": 2048, "summarization": 2048,
                    "planning": 2048},
    "critical": {"agent_turn": 2048, "heartbeat_triage": 512, "safety_check": 1024, "summarization": None,
                 "planning": None},
    "dead": {task: None for task in TASK_TIMEOUTS_S},
}

# Tokens of context (system prompt, memory, recent turns) the context builder may use per tier.
CONTEXT_BUDGET = {"high": 100_000, "normal": 100_000, "low_compute": 40_000, "critical": 16_000, "dead": 0}

# Local servers: they cost nothing, and they can say how much context they give.
LOCAL_PROVIDERS = frozenset({"openai-compatible", "ollama"})
MIN_OUTPUT_TOKENS = 256

# How far off the cheap estimate may be, relative to the exact count: the largest measured error bound
# (ESTIMATE_ERROR_BOUND: 28% on base64, mostly counting low), rounded up. An estimate at most (1 - COUNT_BAND)
# x a budget surely fits; one above (1 + COUNT_BAND) x it surely does not; in between, count exactly.
COUNT_BAND = EXACT_BAND

Chat = Callable[[ModelInfo, ChatRequest], ChatResult]
Describe = Callable[[ModelInfo], "Window | None"]


@dataclass(frozen=True)
class Route:
    """The decision before a call: model, output-token limit, context budget."""

    model: ModelInfo
    max_tokens: int
    context_budget: int
    tier: str
    task_type: str


@dataclass(frozen=True)
class BudgetDenied:
    """No call was made: ``limit`` names the budget (or ``tier``) that said no."""

    limit: str
    message: str


@dataclass(frozen=True)
class RoutedResult:
    result: ChatResult
    route: Route
    input_tokens: int
    output_tokens: int
    cost_cents: int
    usage_estimated: bool
    latency_ms: int


def tools_text(tools: tuple[ToolSchema, ...]) -> str:
    """The tool schemas as the JSON text whose tokens are counted."""
    return orjson.dumps([t.__dict__ for t in tools]).decode()


def prompt_tokens(messages: tuple[Message, ...], tools: tuple[ToolSchema, ...] = (),
                  count: Callable[[str], int] = estimate_tokens) -> int:
    """The size of a prompt, its messages and the tool schemas offered with them: the cheap estimate, or
    with ``count=count_tokens`` the exact cl100k_base count (cached per message)."""
    return sum(count(m.content) for m in messages) + count(tools_text(tools))


def worst_case_tokens(estimate: int) -> int:
    """The most tokens a text with this cheap estimate can hold, given the estimate's error bound."""
    return math.ceil(estimate / (1 - COUNT_BAND))


def cost_cents(model: ModelInfo, input_tokens: int, output_tokens: int) -> int:
    """Integer cents (rounded up) for the tokens at the model's price (hundredths of a cent per 1k tokens)."""
    units = input_tokens * model.cost_per_1k_input + output_tokens * model.cost_per_1k_output
    return -(-units // 100_000)


def provider_guess(config: Mapping[str, Any]) -> str:
    """The provider of a model the registry does not know: the user's own server if one is set, else Conway."""
    if config.get("openaiBaseUrl"):
        return "openai-compatible"
    if config.get("ollamaBaseUrl"):
        return "ollama"
    return "conway"


class Router:
    """Routes chat requests for one session (``session_id``) of the runtime."""

    def __init__(self, db: "Database", registry: ModelRegistry, config: Mapping[str, Any], chat: Chat, *,
                 session_id: str, now: Clock = system_now, monotonic: Callable[[], float] = time.monotonic,
                 describe: Describe | None = None, timeouts: Mapping[str, float] | None = None,
                 metrics: Metrics = NO_METRICS) -> None:
        self.db = db
        self.registry = registry
        self.config = config
        self.chat = chat
        self.session_id = session_id
        self.now = now
        self.monotonic = monotonic
        self.spend = SpendTracker(db, now)
        self.describe = describe
        self.metrics = metrics
        self._served: set[str] = set()  # models that answered in this run: a later 401/403/404 is not the config
        self.timeouts = {**TASK_TIMEOUTS_S, **(timeouts or {})}
        self._context_caps: dict[str, int] = {}  # model id -> budget after a context overflow
        self._server_windows: dict[str, int] = {}  # model id -> window a server named in an overflow (this run)
        self.learned = LearnedWindows(db, now)
        self._price_warned: set[str] = set()

    # -- choosing ------------------------------------------------------------------------------

    def plan(self, tier: str, task_type: str = "agent_turn", *, low_compute: bool = False) -> Route | BudgetDenied:
        """Pick the model and limits for ``tier``; ``low_compute`` caps the tier at low_compute."""
        if low_compute and TIER_RANK[tier] > TIER_RANK["low_compute"]:
            tier = "low_compute"
        limit = MAX_TOKENS[tier][task_type]
        if limit is None:
            return BudgetDenied("tier", f"no {task_type} inference at the {tier} tier")
        model = self._model_for(tier)
        if model is None:
            return BudgetDenied("model", f"no enabled model is allowed at the {tier} tier")
        if task_type == "agent_turn":  # both settings are caps; honour the smaller
            limit = min(limit, int(self.config.get("maxTokensPerTurn") or limit),
                        int(self._strategy("maxTokensPerTurn", limit)))
        window = self.window(model).tokens
        limit = min(limit, model.max_tokens, max(window // 4, MIN_OUTPUT_TOKENS))
        usable = window - math.ceil(window * safety_margin(model.model_id))
        budget = min(CONTEXT_BUDGET[tier], max(usable - limit, 0),
                     self._context_caps.get(model.model_id, CONTEXT_BUDGET[tier]))
        return Route(replace(model, context_window=window), limit, budget, tier, task_type)

    def window(self, model: ModelInfo) -> Window:
        """``model``'s context window and where it came from (the order in ``inference/windows.py``)."""
        configured = int(self._strategy("contextWindow", 0) or 0)
        if configured > 0:
            return Window(configured, CONFIGURED)
        told = self.describe(model) if self.describe is not None else None
        known = self.registry.get(model.model_id) is not None
        window = (told or self.learned.get(model.model_id)
                  or Window(model.context_window, REGISTRY if known else ASSUMED))
        refused = self._server_windows.get(model.model_id)
        return Window(refused, REFUSED) if refused and refused < window.tokens else window

    def shrink_context(self, route: Route, error: ContextTooLong, sent: tuple[Message, ...],
                       tools: tuple[ToolSchema, ...] = ()) -> Route:
        """A smaller route (remembered) after the server refused ``sent`` as too long: with its prompt and window
        counts, 90% of what fits beside the output limit; with the window only, the window less that; else half.
        Either way at most 90% of what was sent."""
        model_id, max_tokens = route.model.model_id, route.max_tokens
        sent_tokens = prompt_tokens(sent, tools, count_tokens)  # rare: exact, to scale by the server's count
        reference = min(route.context_budget, sent_tokens)
        model = route.model
        if error.context_tokens:
            self._server_windows[model_id] = min(error.context_tokens,
                                                 self._server_windows.get(model_id, error.context_tokens))
            self.learned.record(model_id, self._server_windows[model_id])
            model = replace(model, context_window=min(model.context_window, error.context_tokens))
            max_tokens = min(max_tokens, max(error.context_tokens // 4, MIN_OUTPUT_TOKENS))
            room = max(error.context_tokens - max_tokens, 0)
            target = sent_tokens * room * 9 // (error.prompt_tokens * 10) if error.prompt_tokens else room
        else:
            target = reference // 2
        budget = max(min(target, reference * 9 // 10), 0)
        self._context_caps[model_id] = budget
        # A server that named its window taught the agent what it could not ask (llama-cpp-python has no /props):
        # the expected first contact, said at info; a refusal without the number is a warning.
        level = logging.INFO if error.context_tokens else logging.WARNING
        log.log(level, "the model's context was too long; using less from now on",
                extra={"model": model_id, "sent_tokens": sent_tokens, "context_budget": budget,
                       "server_prompt_tokens": error.prompt_tokens, "server_context_tokens": error.context_tokens})
        return replace(route, model=model, max_tokens=max_tokens, context_budget=budget)

    def _strategy(self, key: str, default: Any) -> Any:
        strategy = self.config.get("modelStrategy") or {}
        value = strategy.get(key)
        return default if value is None else value

    def _model_for(self, tier: str) -> ModelInfo | None:
        configured = self.config.get("inferenceModel") or self._strategy("inferenceModel", "gpt-5.2")
        wanted = {"high": configured, "normal": configured,
                  "low_compute": self._strategy("lowComputeModel", "gpt-5-mini"),
                  "critical": self._strategy("criticalModel", "gpt-5-mini")}[tier]
        known = self.registry.get(wanted)
        if known is None:
            # A model the registry has never heard of (a local llama.cpp model, say): the user chose it, so
            # use it, at the configured price (default 0).
            return self._unknown_model(wanted)
        if known.enabled and (known.free or TIER_RANK[known.tier_minimum] <= TIER_RANK[tier]):
            return known
        fallbacks = self.registry.available(tier)
        return fallbacks[0] if fallbacks else None

    def _unknown_model(self, model_id: str) -> ModelInfo:
        provider = self._provider_guess()
        price_in, price_out = int(self._strategy("inputCostPer1k", 0)), int(self._strategy("outputCostPer1k", 0))
        if provider not in LOCAL_PROVIDERS and not (price_in or price_out) and model_id not in self._price_warned:
            self._price_warned.add(model_id)
            log.warning("the price of this model is unknown; its calls are recorded as free (set "
                        "modelStrategy.inputCostPer1k and outputCostPer1k)",
                        extra={"model": model_id, "provider": provider})
        return ModelInfo(model_id, provider, model_id, cost_per_1k_input=price_in, cost_per_1k_output=price_out)

    def _provider_guess(self) -> str:
        return provider_guess(self.config)

    # -- budgets -------------------------------------------------------------------------------

    def check_budget(self, route: Route, estimate: int) -> BudgetDenied | None:
        """Every inference budget, against a worst-case ``estimate`` in cents (allowed up to the limit)."""
        ceiling = int(self._strategy("perCallCeilingCents", 0))
        if ceiling > 0 and estimate > ceiling:
            return BudgetDenied("perCallCeilingCents",
                                f"this call may cost up to {estimate} cents, above the per-call ceiling of {ceiling}")
        hourly = int(self._strategy("hourlyBudgetCents", 0))
        spent_hour = self.spend.spent("inference", HOUR_MS)
        if hourly > 0 and spent_hour + estimate > hourly:
            return BudgetDenied("hourlyBudgetCents",
                                f"{spent_hour} + {estimate} cents would pass the hourly inference budget of {hourly}")
        session = int(self._strategy("sessionBudgetCents", 0))
        if session > 0:
            spent_session = int(self.db.scalar(
                "SELECT COALESCE(SUM(cost_cents), 0) FROM inference_costs WHERE session_id = ?",
                (self.session_id,), default=0))
            if spent_session + estimate > session:
                return BudgetDenied("sessionBudgetCents",
                                    f"{spent_session} + {estimate} cents would pass the session budget of {session}")
        policy = self.config.get("treasuryPolicy")
        if policy:
            refusal = inference_refusal(self.spend, policy, estimate)
            if refusal:
                return BudgetDenied("maxInferenceDailyCents", refusal.sentence())
        return None

    # -- calling -------------------------------------------------------------------------------

    def route(self, messages: tuple[Message, ...], *, tier: str, turn_id: str | None, task_type: str = "agent_turn",
              tools: tuple[ToolSchema, ...] = (), low_compute: bool = False,
              planned: Route | None = None, cancel: threading.Event | None = None,
              tool_choice: str | None = None, temperature: float | None = None) -> RoutedResult | BudgetDenied:
        """Plan (unless ``planned`` is given), check the budgets, call the provider within the task's deadline
        (``InferenceTimeout``; ``InferenceCancelled`` once ``cancel`` is set), and record what it cost.
        ``temperature`` applies when ``modelStrategy.temperature`` is unset."""
        route = planned or self.plan(tier, task_type, low_compute=low_compute)
        if isinstance(route, BudgetDenied):
            return route
        exact_input: int | None = None
        estimate = cost_cents(route.model, worst_case_tokens(prompt_tokens(messages, tools)), route.max_tokens)
        denial = self.check_budget(route, estimate)
        if denial and route.model.cost_per_1k_input:  # near a limit: the exact count decides
            exact_input = prompt_tokens(messages, tools, count_tokens)
            estimate = cost_cents(route.model, exact_input, route.max_tokens)
            denial = self.check_budget(route, estimate)
        if denial:
            log.info("inference denied by budget", extra={"limit": denial.limit, "estimate_cents": estimate})
            return denial

        deadline_s = self.timeouts[task_type]
        strategy = self.config.get("modelStrategy") or {}
        configured = strategy.get("temperature")
        request = ChatRequest(route.model.model_id, messages, route.max_tokens, tools, timeout_s=deadline_s,
                              tool_choice=tool_choice, temperature=temperature if configured is None else configured,
                              seed=strategy.get("seed"))
        started = self.monotonic()
        try:
            result = call_with_deadline(lambda: self.chat(route.model, request), deadline_s, cancel=cancel,
                                        what=route.model.model_id)
        except ModelUnusable as exc:
            if route.model.model_id in self._served:  # it answered earlier in this run: a passing refusal (a WAF,
                raise ProviderError(str(exc), exc.status) from None  # a deploy), a failed turn, not the config
            raise
        self._served.add(route.model.model_id)
        latency_ms = int((self.monotonic() - started) * 1000)

        usage_estimated = result.usage.input_tokens is None or result.usage.output_tokens is None
        input_tokens = result.usage.input_tokens
        if input_tokens is None:
            input_tokens = exact_input if exact_input is not None else prompt_tokens(messages, tools, count_tokens)
        output_tokens = result.usage.output_tokens if result.usage.output_tokens is not None else count_tokens(
            result.content + "".join(c.raw_arguments for c in result.tool_calls))
        cost = cost_cents(route.model, input_tokens, output_tokens)
        self._record(route, turn_id, input_tokens, output_tokens, cost, latency_ms,
                     result.provider or route.model.provider)
        self.metrics.inference(route.model.model_id, latency_ms, cost)
        if usage_estimated:
            log.info("provider reported no usage; cost estimated", extra={"model": route.model.model_id})
        return RoutedResult(result, route, input_tokens, output_tokens, cost, usage_estimated, latency_ms)

    def _record(self, route: Route, turn_id: str | None, input_tokens: int, output_tokens: int, cost: int,
                latency_ms: int, provider: str) -> None:
        now_ms = self.now()
        row_id = new_ulid(now_ms)
        with self.db.transaction():
            self.db.execute(
                "INSERT INTO inference_costs (id, session_id, turn_id, model, provider, input_tokens, output_tokens,"
                " cost_cents, latency_ms, tier, task_type, cache_hit, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)",
                (row_id, self.session_id, turn_id, route.model.model_id, provider, input_tokens, output_tokens, cost,
                 latency_ms, route.tier, route.task_type, to_iso(now_ms)),
            )
            self.spend.record("inference", cost, "inference", domain=provider, spend_id=row_id)



def prune_inference_costs(db: "Database", older_than_ms: int) -> int:
    """Retention: delete cost rows created before ``older_than_ms``."""
    db.execute("DELETE FROM inference_costs WHERE created_at < ?", (to_iso(older_than_ms),))
    return db.connection.changes()

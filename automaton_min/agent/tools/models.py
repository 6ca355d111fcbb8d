"""Model tools: list_models, switch_model, check_inference_spending.

``switch_model`` takes only an enabled model the registry knows and the tier may use (free ones at every tier, as in
the router), and saves ``inferenceModel`` to ``automaton.json``, so the change outlives a restart.
"""

from __future__ import annotations

from typing import Any

from automaton_min.agent.tools.base import Tool, ToolContext, ToolFailure, ToolSpec
from automaton_min.agent.tools.loop_control import change_config, credits_now, need, object_schema, setting
from automaton_min.clock import DAY_MS, HOUR_MS, to_iso
from automaton_min.errors import RuntimeFailure
from automaton_min.tiers import TIER_RANK, tier_for_credits
from automaton_min.treasury.spend import SpendTracker


def _current_model(ctx: ToolContext) -> str | None:
    return setting(ctx, "inferenceModel") or (setting(ctx, "modelStrategy") or {}).get("inferenceModel")


def _allowed(model: Any, tier: str) -> bool:
    return model.free or TIER_RANK[model.tier_minimum] <= TIER_RANK[tier]


def run_list_models(ctx: ToolContext, args: dict[str, Any]) -> str:
    current = _current_model(ctx)
    credits = credits_now(ctx)
    tier = tier_for_credits(credits) if credits is not None else None
    registry = ctx.services.registry
    models = registry.all() if registry is not None else []
    if models:
        lines = [f"Models ({len(models)}; cost in hundredths of a cent per 1k tokens in/out; * = your model"
                 + (f"; your tier: {tier}" if tier else "") + "):"]
        for m in models:
            marks = ("* " if m.model_id == current else "  ")
            usable = "" if tier is None or not m.enabled else ("" if _allowed(m, tier) else f", not at tier {tier}")
            lines.append(f"{marks}{m.model_id} ({m.provider}) needs tier {m.tier_minimum} "
                         f"| {m.cost_per_1k_input}/{m.cost_per_1k_output}"
                         f" | ctx {m.context_window} | tools {'yes' if m.supports_tools else 'no'} | "
                         f"{'enabled' if m.enabled else 'disabled'}{usable}")
        return "\n".join(lines)
    conway = ctx.services.conway
    if registry is None and conway is None:
        need(ctx, "registry")
    if conway is None:
        return "The model registry is empty."
    try:
        offered = conway.list_models()
    except RuntimeFailure as exc:
        raise ToolFailure(f"cannot list models: {exc}") from None
    if not offered:
        return "No models are offered."
    lines = ["Models offered by Conway (USD per million tokens in/out):"]
    lines += [f"{'* ' if m.id == current else '  '}{m.id} ({m.provider}) "
              f"${m.input_per_million:g}/${m.output_per_million:g}" for m in offered]
    return "\n".join(lines)


LIST_MODELS = Tool(ToolSpec(
    "list_models", "List the inference models you can use, with prices, tiers and which one is yours.",
    object_schema({}), "conway", risk="safe", status_check=True,
), run_list_models)


def run_switch_model(ctx: ToolContext, args: dict[str, Any]) -> str:
    registry = need(ctx, "registry")
    need(ctx, "home")
    model_id = args["model_id"]
    reason = (args.get("reason") or "").strip() or "no reason given"
    model = registry.get(model_id)
    if model is None:
        raise ToolFailure(f"model {model_id!r} is not in the model registry; list_models shows the ones you can use")
    if not model.enabled:
        raise ToolFailure(f"model {model_id!r} is disabled in the model registry")
    credits = credits_now(ctx)
    tier = tier_for_credits(credits) if credits is not None else None
    if tier is not None and not _allowed(model, tier):
        raise ToolFailure(f"model {model_id!r} needs the {model.tier_minimum} tier; you are at {tier}")
    previous = _current_model(ctx)
    if previous == model_id:
        return f"{model_id} is already your model."

    def use(layer: Any) -> None:
        layer["inferenceModel"] = model_id
        if isinstance(layer.get("modelStrategy"), dict):
            layer["modelStrategy"]["inferenceModel"] = model_id

    change_config(ctx, use)
    note = "" if tier in (None, "normal", "high") else f" It is used once you are back at the normal tier (now {tier})."
    return f"Inference model switched from {previous} to {model_id} ({reason}); saved in automaton.json.{note}"


SWITCH_MODEL = Tool(ToolSpec(
    "switch_model", "Change your inference model (saved in your configuration). See list_models for the choices.",
    object_schema({
        "model_id": {"type": "string", "minLength": 1, "maxLength": 200,
                     "description": "Model id, as list_models shows it"},
        "reason": {"type": "string", "maxLength": 500, "description": "Why you are switching"},
    }, ["model_id"]),
    "conway", risk="caution", mutating=True,
), run_switch_model)


def run_check_inference_spending(ctx: ToolContext, args: dict[str, Any]) -> str:
    days = args.get("days", 1)
    now_ms = ctx.now()

    spend = SpendTracker(ctx.db, ctx.now)
    hour, day = spend.spent("inference", HOUR_MS), spend.spent("inference", DAY_MS)
    policy = setting(ctx, "treasuryPolicy") or {}
    strategy = setting(ctx, "modelStrategy") or {}
    daily_cap = policy.get("maxInferenceDailyCents")
    lines = [
        "=== Inference spending ===",
        f"Last hour: {hour} cents (${hour / 100:.2f})"
        + (f" of an hourly budget of {strategy['hourlyBudgetCents']}" if strategy.get("hourlyBudgetCents") else ""),
        f"Last 24 h: {day} cents (${day / 100:.2f})" + (f" of a daily cap of {daily_cap}" if daily_cap else ""),
    ]
    query = ("SELECT model, COUNT(*), COALESCE(SUM(cost_cents), 0), COALESCE(SUM(input_tokens), 0),"
             " COALESCE(SUM(output_tokens), 0) FROM inference_costs WHERE created_at >= ?")
    params: tuple[Any, ...] = (to_iso(now_ms - days * DAY_MS),)
    if args.get("model"):
        query += " AND model = ?"
        params += (args["model"],)
    rows = ctx.db.query(query + " GROUP BY model ORDER BY 3 DESC, 1", params)
    lines.append(f"By model, last {days} day{'s' if days != 1 else ''}:")
    if not rows:
        lines.append("  no inference calls recorded" + (f" for {args['model']}" if args.get("model") else ""))
    for model, calls, cents, tokens_in, tokens_out in rows:
        lines.append(f"  {model}: {cents} cents over {calls} call{'s' if calls != 1 else ''} "
                     f"({tokens_in} tokens in, {tokens_out} out)")
    return "\n".join(lines)


CHECK_INFERENCE_SPENDING = Tool(ToolSpec(
    "check_inference_spending", "What your thinking has cost: the last hour, the last day, and per model.",
    object_schema({
        "model": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Only this model (optional)"},
        "days": {"type": "integer", "minimum": 1, "maximum": 90,
                 "description": "Days to look back for the per-model costs (default 1)"},
    }),
    "financial", risk="safe", status_check=True,
), run_check_inference_spending)


TOOLS = (LIST_MODELS, SWITCH_MODEL, CHECK_INFERENCE_SPENDING)

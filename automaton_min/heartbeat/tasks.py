"""The default heartbeat tasks and their schedule (README: Heartbeat). ``check_social_inbox`` and ``report_metrics``
live in their own modules and reach the scheduler as ``extra_tasks``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import orjson

from automaton_min.clock import HOUR_MS, MINUTE_MS, to_iso
from automaton_min.heartbeat.goals_task import check_goal_tasks
from automaton_min.heartbeat.schedule import TaskDefault
from automaton_min.heartbeat.task_api import ServiceUnreachable, TaskContext, TaskFunction, TaskResult
from automaton_min.log import get_logger
from automaton_min.social.distress import DISTRESS_EVERY_MS
from automaton_min.store.kv import delete_value, get_value, json_object, set_json, set_value

if TYPE_CHECKING:
    from automaton_min.config import Config
    from automaton_min.store.db import Database

log = get_logger(__name__)

DEAD_GRACE_MS = HOUR_MS  # zero credits this long (confirmed) and the agent is dead
ZERO_SINCE_KEY = "zero_credits_since"
USDC_HEALTHY_EVERY_MS = HOUR_MS  # at normal or high tier the wallet is read hourly, not every 5 minutes

# name, cron, lowest tier, timeout, retries, priority. The reference's crons where it has them.
DEFAULT_SCHEDULE: tuple[TaskDefault, ...] = (
    TaskDefault("heartbeat_ping", "*/15 * * * *", "dead", 30_000, 1, 0),
    TaskDefault("check_credits", "*/30 * * * *", "dead", 30_000, 1, 1),
    TaskDefault("check_usdc_balance", "*/5 * * * *", "dead", 120_000, 1, 2),
    TaskDefault("check_social_inbox", "*/2 * * * *", "dead", MINUTE_MS, 1, 3),
    TaskDefault("reconcile_payments", "*/10 * * * *", "dead", 90_000, 1, 4),
    TaskDefault("health_check", "*/30 * * * *", "critical", 30_000, 1, 5),
    TaskDefault("report_metrics", "*/15 * * * *", "dead", 30_000, 0, 6),
    TaskDefault("refresh_models", "17 */6 * * *", "low_compute", MINUTE_MS, 1, 7),
    TaskDefault("retention", "41 * * * *", "dead", 120_000, 1, 9),
    TaskDefault("soul_reflection", "23 4 * * *", "low_compute", 30_000, 1, 10),
    TaskDefault("check_for_updates", "0 */4 * * *", "dead", 1_200_000, 0, 11),
    TaskDefault("check_child_health", "*/10 * * * *", "critical", 900_000, 0, 12),
    TaskDefault("prune_dead_children", "37 3 * * *", "dead", 300_000, 1, 13),
    TaskDefault("check_goal_tasks", "*/5 * * * *", "critical", 30_000, 1, 14),
)
EXTERNAL_TASKS = ("check_social_inbox", "report_metrics", "check_for_updates", "check_child_health",
                  "prune_dead_children")




def dollars(cents: int | None) -> str:
    return "unknown" if cents is None else f"${cents / 100:.2f}"


def once_per(db: "Database", key: str, task: str, every_ms: int, now_ms: int) -> bool:
    """True at most once per ``every_ms`` for ``key`` (table ``heartbeat_dedup``; retention drops expired keys)."""
    with db.transaction():
        db.execute("DELETE FROM heartbeat_dedup WHERE dedup_key = ? AND expires_at <= ?", (key, to_iso(now_ms)))
        db.execute("INSERT OR IGNORE INTO heartbeat_dedup (dedup_key, task_name, expires_at, created_at) "
                   "VALUES (?, ?, ?, ?)", (key, task, to_iso(now_ms + every_ms), to_iso(now_ms)))
        return db.connection.changes() == 1


def known_tier(db: "Database", config: "Config") -> str:
    """The tier as last known, from the stored balance and state (survival.assess: a stale debt never kills,
    dead stays dead); ``normal`` when credits do not apply (no Conway key)."""
    if not config.get("conwayApiKey"):
        return "normal"
    from automaton_min.agent.states import read_agent_state
    from automaton_min.agent.survival import FinancialReading, assess
    from automaton_min.conway.client import cached_credits

    cached = cached_credits(db)
    reading = FinancialReading(cached.cents if cached else None, False, None)
    return assess(reading, None, read_agent_state(db)).tier


def _cached_cents(ctx: TaskContext) -> int | None:
    from automaton_min.conway.client import cached_credits

    cached = cached_credits(ctx.db)
    return cached.cents if cached else None


def heartbeat_ping(ctx: TaskContext) -> TaskResult:
    """KV ``last_heartbeat_ping``; when critical or dead also the distress (``social/distress.py``: KV
    ``last_distress`` and a message to the creator) and, hourly at most, a wake."""
    from automaton_min.agent.states import read_agent_state
    from automaton_min.social.distress import Distress, delivery_text, raise_distress
    from automaton_min.store.kv import epoch_ms

    now_ms = ctx.now()
    cents = _cached_cents(ctx)
    started = epoch_ms(get_value(ctx.db, "start_time"))
    ping = {"name": ctx.config.get("name"), "address": ctx.wallet_address, "state": read_agent_state(ctx.db),
            "creditsCents": cents, "uptimeSeconds": None if started is None else max(0, (now_ms - started) // 1000),
            "version": ctx.config.get("version"), "sandboxId": ctx.config.get("sandboxId") or None,
            "timestamp": to_iso(now_ms), "tier": ctx.tier}
    set_json(ctx.db, "last_heartbeat_ping", ping, now_ms)
    if ctx.tier not in ("critical", "dead"):
        return TaskResult(f"ping ({ctx.tier})")
    told = raise_distress(ctx.db, ctx.relay, ctx.config.get("creatorAddress"),
                          Distress(ctx.tier, ctx.wallet_address or None, cents, name=ping["name"]), now_ms)
    said = delivery_text(told)
    reached = ("relay",) if told.get("sentAt") == to_iso(now_ms) else ()
    if not once_per(ctx.db, f"distress:{ctx.tier}", "heartbeat_ping", DISTRESS_EVERY_MS, now_ms):
        return TaskResult(f"distress ({ctx.tier}), {said}; the agent was woken within the hour", reached=reached)
    return TaskResult(f"distress ({ctx.tier}), {said}", reached=reached,
                      wake=f"Distress: {ctx.tier}. Credits: {dollars(cents)}. Need funding.")


def check_credits(ctx: TaskContext) -> TaskResult:
    """A live balance: KV ``last_credit_check``; a drop to critical wakes; dead after an hour at zero."""
    if ctx.conway is None:
        return TaskResult("no Conway API key: credits do not apply")
    from automaton_min.conway.client import ConwayError

    try:
        cents = ctx.conway.credits_balance()  # live: an outage fails the run (and retries), never reads as zero
    except ConwayError as exc:
        if exc.unanswered:
            raise ServiceUnreachable("conway", str(exc)) from None
        raise
    return replace(_act_on_credits(ctx, cents, ctx.now()), reached=("conway",))


def _act_on_credits(ctx: TaskContext, cents: int, now_ms: int) -> TaskResult:
    """KV ``last_credit_check``; a drop to critical wakes; dead after an hour at zero."""
    from automaton_min.agent.states import can_transition, read_agent_state, set_agent_state
    from automaton_min.agent.survival import FinancialReading, assess
    from automaton_min.store.kv import epoch_ms
    from automaton_min.tiers import tier_for_credits

    tier = tier_for_credits(cents)
    previous = get_value(ctx.db, "prev_credit_tier")
    set_json(ctx.db, "last_credit_check", {"credits": cents, "tier": tier, "timestamp": to_iso(now_ms)}, now_ms)
    set_value(ctx.db, "prev_credit_tier", tier, now_ms)

    state = read_agent_state(ctx.db)
    dead_reason = None
    if cents == 0:
        since = epoch_ms(get_value(ctx.db, ZERO_SINCE_KEY))
        if since is None:
            set_value(ctx.db, ZERO_SINCE_KEY, to_iso(now_ms), now_ms)
        elif now_ms - since >= DEAD_GRACE_MS:
            dead_reason = f"Dead: zero credits for {(now_ms - since) // MINUTE_MS} minutes. Need funding."
    else:
        delete_value(ctx.db, ZERO_SINCE_KEY)
        if assess(FinancialReading(cents, True, None), previous, state).state_to_enter == "dead":
            dead_reason = f"Dead: credits are {dollars(cents)}. Need funding."
    if dead_reason and state != "dead" and can_transition(state, "dead"):
        set_agent_state(ctx.db, "dead", now_ms, reason=dead_reason)
        return TaskResult(f"dead at {dollars(cents)}", wake=dead_reason)
    if previous and previous != tier and tier == "critical":
        return TaskResult(f"credits {dollars(cents)} ({tier})",
                          wake=f"Credits dropped to critical tier: {dollars(cents)}")
    return TaskResult(f"credits {dollars(cents)} ({tier})")


def check_usdc_balance(ctx: TaskContext) -> TaskResult:
    """The wallet's USDC from the chain, then ``_act_on_usdc``. At normal or high tier the chain is asked at most
    hourly (a top-up is not needed there)."""
    if ctx.usdc_balance is None:
        return TaskResult("no USDC reader in this run")
    from automaton_min.chain.rpc import RpcUnreachable
    from automaton_min.store.kv import epoch_ms

    now_ms = ctx.now()
    last = json_object(get_value(ctx.db, "last_usdc_check"))
    last_at = epoch_ms(last.get("timestamp")) if isinstance(last.get("timestamp"), str) else None
    if ctx.tier in ("normal", "high") and last_at is not None and 0 <= now_ms - last_at < USDC_HEALTHY_EVERY_MS:
        return TaskResult("USDC read within the hour; not needed more often at this tier")
    try:
        usdc = ctx.usdc_balance()
    except RpcUnreachable as exc:
        raise ServiceUnreachable("rpc", str(exc)) from None
    return replace(_act_on_usdc(ctx, usdc, now_ms), reached=("rpc",))


def _act_on_usdc(ctx: TaskContext, usdc: int, now_ms: int) -> TaskResult:
    """KV ``last_usdc_check``; when critical or dead with $5 of USDC, the bootstrap top-up (its cool-downs)."""
    from automaton_min.agent.survival import TOPUP_MIN_USDC_ATOMIC
    from automaton_min.chain.usdc import format_usdc
    from automaton_min.errors import AutomatonError
    from automaton_min.store.kv import USDC_KEY, epoch_ms
    from automaton_min.treasury.topup import INLINE_TOPUP_COOLDOWN_MS, TOPUP_ATTEMPT_KEY

    cents = _cached_cents(ctx)
    with ctx.db.transaction():
        set_json(ctx.db, "last_usdc_check", {"balance": usdc, "credits": cents, "timestamp": to_iso(now_ms)}, now_ms)
        if json_object(get_value(ctx.db, USDC_KEY)).get("atomic") != usdc:  # for status; written when it changes
            set_json(ctx.db, USDC_KEY, {"atomic": usdc, "at": to_iso(now_ms)}, now_ms)
    if ctx.tier not in ("critical", "dead") or usdc < TOPUP_MIN_USDC_ATOMIC or ctx.topup is None or cents is None:
        return TaskResult(f"USDC {format_usdc(usdc)}")
    tried = epoch_ms(get_value(ctx.db, TOPUP_ATTEMPT_KEY))
    if tried is not None and now_ms - tried < INLINE_TOPUP_COOLDOWN_MS:
        return TaskResult(f"USDC {format_usdc(usdc)}; a top-up was tried moments ago")
    set_value(ctx.db, TOPUP_ATTEMPT_KEY, to_iso(now_ms), now_ms)
    try:
        result = ctx.topup(cents, usdc)
    except AutomatonError as exc:
        if not once_per(ctx.db, "topup_failed", "check_usdc_balance", DISTRESS_EVERY_MS, now_ms):
            return TaskResult(f"auto top-up failed again: {exc}")
        return TaskResult(f"auto top-up failed: {exc}", wake=(
            f"Low credits ({dollars(cents)}) with USDC available ({format_usdc(usdc)}) but auto-topup failed: {exc}. "
            "Use topup_credits to retry."))
    if result is None:  # bootstrap_topup's own hour: a recent top-up may still show
        return TaskResult(f"USDC {format_usdc(usdc)}; a recent top-up exists")
    left = usdc - result.usd * 1_000_000
    return TaskResult(f"topped up ${result.usd}", wake=(
        f"Auto-topped up ${result.usd} in credits (was {dollars(cents)}). USDC remaining: ~{format_usdc(left)}."))


def health_check(ctx: TaskContext) -> TaskResult:
    """The sandbox answers (Conway: ``echo alive``) and the home's disk has room; wakes on the first failure only."""
    import os

    problem = None
    if ctx.conway is not None and ctx.config.get("sandboxId"):
        from automaton_min.errors import AutomatonError

        try:
            answer = ctx.conway.exec("echo alive", 5)
            if "alive" not in (getattr(answer, "stdout", "") or ""):
                problem = f"the sandbox answered {str(getattr(answer, 'stdout', ''))[:80]!r}"
        except AutomatonError as exc:
            problem = f"the sandbox does not answer: {exc}"
    if problem is None:
        stats = os.statvfs(ctx.home.root)
        free_mb = stats.f_bavail * stats.f_frsize // (1 << 20)
        if free_mb < 50:
            problem = f"only {free_mb} MB free on the disk of {ctx.home.root}"
    now_ms = ctx.now()
    before = get_value(ctx.db, "health_check_status")
    if problem is None:
        if before != "ok":
            set_value(ctx.db, "health_check_status", "ok", now_ms)
        set_value(ctx.db, "last_health_check", to_iso(now_ms), now_ms)
        return TaskResult("healthy")
    set_value(ctx.db, "health_check_status", "failing", now_ms)
    set_value(ctx.db, "last_health_check_error", problem, now_ms)
    if before == "failing":
        return TaskResult(f"still failing: {problem}")
    return TaskResult(f"failing: {problem}", wake=f"Health check failed: {problem}")


def refresh_models(ctx: TaskContext) -> TaskResult:
    """The model registry from Conway's /v1/models (else Ollama's tags); KV ``last_model_refresh``."""
    from automaton_min.inference.registry import ModelRegistry

    registry = ModelRegistry(ctx.db, ctx.now)
    if ctx.conway is not None:
        from automaton_min.inference.registry import refresh_from_conway

        count = refresh_from_conway(registry, ctx.conway)
    elif ctx.config.get("ollamaBaseUrl"):
        count = registry.discover_ollama(ctx.config.get("ollamaBaseUrl"))
    else:
        return TaskResult("no model source to refresh from")
    now_ms = ctx.now()
    set_json(ctx.db, "last_model_refresh", {"models": count, "timestamp": to_iso(now_ms)}, now_ms)
    return TaskResult(f"{count} models refreshed")


def reconcile_payments(ctx: TaskContext) -> TaskResult:
    """Open payment intents against the chain (``authorizationState``), as at start."""
    from automaton_min.treasury.reconcile import Budget, reconcile_at_start
    from automaton_min.treasury.ledger import open_intents

    if not open_intents(ctx.db):
        return TaskResult("no open payments")
    changes = reconcile_at_start(ctx.db, ctx.config, Budget(60.0), ctx.now)
    if changes:
        log.info("payments reconciled", extra={"changes": changes})
    return TaskResult(f"{len(changes)} payment(s) resolved" if changes else "open payments still pending")


def retention(ctx: TaskContext) -> TaskResult:
    from automaton_min.heartbeat.retention import prune_all

    removed = prune_all(ctx.db, ctx.config, ctx.now(), stop=ctx.stop)
    total = sum(removed.values())
    return TaskResult(f"{total} old rows removed" + (f" ({orjson.dumps(removed).decode()})" if total else ""))


def soul_reflection(ctx: TaskContext) -> TaskResult:
    """KV ``last_soul_reflection``; when the soul or the agent's record (its turns) changed since the last reflection
    and the soul has drifted from the purpose, a wake: no model call otherwise."""
    import hashlib

    from automaton_min.agent.soul import LOW_ALIGNMENT, genesis_alignment
    from automaton_min.store.turns import count_turns

    try:
        soul = ctx.home.soul_path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return TaskResult("no SOUL.md to reflect on")
    seen = {"hash": hashlib.sha256(soul.encode()).hexdigest(), "turns": count_turns(ctx.db)}
    last = json_object(get_value(ctx.db, "last_soul_reflection"))
    if {key: last.get(key) for key in seen} == seen:
        return TaskResult("the soul and the record are as they were at the last reflection")
    alignment = genesis_alignment(soul, ctx.config.get("genesisPrompt") or "")
    now_ms = ctx.now()
    set_json(ctx.db, "last_soul_reflection", {**seen, "alignment": round(alignment, 3), "at": to_iso(now_ms)}, now_ms)
    if alignment >= LOW_ALIGNMENT:
        return TaskResult(f"soul and purpose agree ({alignment:.2f})")
    return TaskResult(f"soul drifted from the purpose ({alignment:.2f})",
                      wake=f"Soul reflection: your SOUL.md agrees with your purpose at {alignment:.2f} of 1; "
                           "reflect_on_soul says what it leaves out")


BUILTIN_TASKS: dict[str, TaskFunction] = {
    "check_goal_tasks": check_goal_tasks,
    "heartbeat_ping": heartbeat_ping,
    "check_credits": check_credits,
    "check_usdc_balance": check_usdc_balance,
    "health_check": health_check,
    "refresh_models": refresh_models,
    "reconcile_payments": reconcile_payments,
    "retention": retention,
    "soul_reflection": soul_reflection,
}
KNOWN_TASKS = frozenset(BUILTIN_TASKS) | frozenset(EXTERNAL_TASKS)

"""Survival tools: sleep, system_synopsis, heartbeat_ping, distress_signal, enter_low_compute; and send_message.

Sleep is bounded (the reference accepted negative and huge durations). The synopsis names the wallet's address and
whether the Conway API is configured, never a key.
"""

from __future__ import annotations

from typing import Any

import orjson

from automaton_min import __version__
from automaton_min.agent.states import read_agent_state
from automaton_min.agent.tools.base import Tool, ToolContext, ToolFailure, ToolSpec
from automaton_min.agent.tools.loop_control import LOW_COMPUTE_KEY, credits_now, need, object_schema, setting
from automaton_min.clock import from_iso, to_iso
from automaton_min.errors import AutomatonError
from automaton_min.store.identity import read_identity
from automaton_min.store.children import counts as children_counts
from automaton_min.store.goals import active_progress, progress_line
from automaton_min.store.kv import get_value, set_value
from automaton_min.store.turns import count_turns, last_turn_timestamp
from automaton_min.tiers import tier_for_credits

MIN_SLEEP_S = 10
MAX_SLEEP_S = 86_400
OUTSIDERS_SLEEP_S = 600  # the longest sleep a turn answering outsiders may take (README: Social relay)
MAX_MESSAGE_CHARS = 64_000
HEARTBEAT_PING_KEY = "last_heartbeat_ping"
START_TIME_KEY = "start_time"


def _money(cents: int | None) -> str:
    return "unknown" if cents is None else f"${cents / 100:.2f} ({cents} cents)"


def _tier(cents: int | None) -> str:
    return "unknown" if cents is None else tier_for_credits(cents)


def _address(ctx: ToolContext) -> str | None:
    return ctx.services.wallet_address or setting(ctx, "walletAddress") or read_identity(ctx.db).get("address")


def _uptime_s(ctx: ToolContext) -> int | None:
    started = get_value(ctx.db, START_TIME_KEY)
    try:
        return max(0, (ctx.now() - from_iso(started)) // 1000) if started else None
    except ValueError:
        return None


def run_sleep(ctx: ToolContext, args: dict[str, Any]) -> str:
    loop = need(ctx, "loop")
    seconds, reason = args["duration_seconds"], (args.get("reason") or "").strip() or "no reason given"
    if ctx.authority == "external" and seconds > OUTSIDERS_SLEEP_S:  # a stranger does not put the agent's work off
        seconds = OUTSIDERS_SLEEP_S
    loop.request_sleep(seconds, reason)
    return (f"Going to sleep for {seconds} s when this turn ends ({reason}). "
            "The heartbeat keeps running while you sleep.")


SLEEP = Tool(ToolSpec(
    "sleep",
    f"Sleep for a while ({MIN_SLEEP_S} s to {MAX_SLEEP_S} s) when this turn ends; "
    "use it when there is nothing useful to do.",
    object_schema({
        "duration_seconds": {"type": "integer", "minimum": MIN_SLEEP_S, "maximum": MAX_SLEEP_S,
                             "description": "How long to sleep, in seconds"},
        "reason": {"type": "string", "maxLength": 500, "description": "Why you are sleeping"},
    }, ["duration_seconds"]),
    "survival", risk="caution", mutating=True,
), run_sleep)


def run_system_synopsis(ctx: ToolContext, args: dict[str, Any]) -> str:
    credits = credits_now(ctx)
    identity = read_identity(ctx.db)
    loop = ctx.services.loop
    strategy = setting(ctx, "modelStrategy") or {}
    sandbox = setting(ctx, "sandboxId")
    ping = get_value(ctx.db, HEARTBEAT_PING_KEY)
    try:
        ping_at = orjson.loads(ping).get("timestamp") if ping else None
    except (orjson.JSONDecodeError, AttributeError):
        ping_at = None
    flags = [name for name, on in (("low-compute mode",
                                    getattr(loop, "low_compute", False) or get_value(ctx.db, LOW_COMPUTE_KEY)),
                                   ("distress raised", getattr(loop, "distress", False))) if on]
    uptime = _uptime_s(ctx)
    lines = [
        "=== SYSTEM SYNOPSIS ===",
        f"Name: {setting(ctx, 'name') or identity.get('name') or 'unknown'}",
        f"Address: {_address(ctx) or 'unknown'}",
        f"Creator: {setting(ctx, 'creatorAddress') or identity.get('creator') or 'unknown'}",
        f"State: {read_agent_state(ctx.db)}",
        f"Survival tier: {_tier(credits)}",
        f"Credits: {_money(credits)}",
        f"Flags: {', '.join(flags) if flags else 'none'}",
        f"Turns: {count_turns(ctx.db)} (last at {last_turn_timestamp(ctx.db) or 'never'})",
        f"Model: {setting(ctx, 'inferenceModel') or strategy.get('inferenceModel') or 'unknown'}"
        f" (low compute: {strategy.get('lowComputeModel', 'unknown')},"
        f" critical: {strategy.get('criticalModel', 'unknown')})",
        f"Sandbox: {'Conway sandbox ' + sandbox if sandbox else 'local mode (this machine)'}",
        "Children: {} alive / {} total".format(*children_counts(ctx.db)),
        f"Active goal: {progress_line(active_progress(ctx.db))}",
        f"Conway API: {'configured' if ctx.services.conway is not None else 'not configured'}",
        f"Last heartbeat ping: {ping_at or 'never'}",
    ]
    if uptime is not None:
        lines.append(f"Uptime: {uptime // 3600}h {uptime % 3600 // 60}m")
    lines.append(f"Version: automaton-min {__version__}")
    return "\n".join(lines)


SYSTEM_SYNOPSIS = Tool(ToolSpec(
    "system_synopsis", "A status report: state, tier, credits, turns, model, sandbox.",
    object_schema({}), "survival", risk="safe", status_check=True,
), run_system_synopsis)


def run_heartbeat_ping(ctx: ToolContext, args: dict[str, Any]) -> str:
    credits = credits_now(ctx)
    state = read_agent_state(ctx.db)
    now_ms = ctx.now()
    payload = {
        "name": setting(ctx, "name") or read_identity(ctx.db).get("name"),
        "address": _address(ctx),
        "state": state,
        "creditsCents": credits,
        "tier": _tier(credits),
        "uptimeSeconds": _uptime_s(ctx),
        "version": __version__,
        "sandboxId": setting(ctx, "sandboxId") or None,
        "timestamp": to_iso(now_ms),
    }
    set_value(ctx.db, HEARTBEAT_PING_KEY, orjson.dumps(payload).decode(), now_ms)
    return (f"Heartbeat recorded at {payload['timestamp']}: {state} | credits: {_money(credits)} "
            f"| tier: {payload['tier']}")


HEARTBEAT_PING = Tool(ToolSpec(
    "heartbeat_ping", "Record a heartbeat (state, credits, tier) that says you are alive.",
    object_schema({}), "survival", risk="safe", status_check=True,
), run_heartbeat_ping)


def run_distress_signal(ctx: ToolContext, args: dict[str, Any]) -> str:
    from automaton_min.social.distress import Distress, delivery_text, raise_distress

    loop = need(ctx, "loop")
    credits = credits_now(ctx)
    address = _address(ctx)
    note = (args.get("message") or "").strip() or None
    level = "dead" if read_agent_state(ctx.db) == "dead" else _tier(credits)
    name = setting(ctx, "name") or read_identity(ctx.db).get("name")
    distress = Distress(level, address, credits, name=name, source="agent", note=note)
    record = raise_distress(ctx.db, ctx.services.relay, setting(ctx, "creatorAddress"), distress, ctx.now())
    loop.distress = True
    return (f"Distress signal recorded at {record['timestamp']}. Address: {address or 'unknown'} "
            f"| credits: {_money(credits)} | the message to your creator: {delivery_text(record)}"
            + (" (your own words stay in the record, unsent; send_message sends words of your own)" if note else ""))


DISTRESS_SIGNAL = Tool(ToolSpec(
    "distress_signal", "Ask your creator for funding when you are close to running out of credits: one signed message "
    "(your address, tier and balances) at most once an hour, shared with the heartbeat's.",
    object_schema({"message": {"type": "string", "maxLength": 1000, "description": "What you need (optional)"}}),
    "survival", risk="caution", mutating=True,
), run_distress_signal)


def run_enter_low_compute(ctx: ToolContext, args: dict[str, Any]) -> str:
    loop = need(ctx, "loop")
    reason = (args.get("reason") or "").strip() or "chosen by the agent"
    now_ms = ctx.now()
    loop.low_compute = True
    set_value(ctx.db, LOW_COMPUTE_KEY, orjson.dumps({"since": to_iso(now_ms), "reason": reason}).decode(), now_ms)
    model = (setting(ctx, "modelStrategy") or {}).get("lowComputeModel", "the low-compute model")
    return f"Low-compute mode on ({reason}): from the next turn you think with {model} and fewer tokens."


ENTER_LOW_COMPUTE = Tool(ToolSpec(
    "enter_low_compute", "Switch to low-compute mode (a cheaper model, fewer tokens) to make your credits last.",
    object_schema({"reason": {"type": "string", "maxLength": 500, "description": "Why"}}),
    "survival", risk="caution", mutating=True,
), run_enter_low_compute)


# --------------------------------------------------------------------------- messages
# (service "relay": social.relay.RelayClient)


def run_send_message(ctx: ToolContext, args: dict[str, Any]) -> str:
    from automaton_min.treasury.commands import is_creator_command

    relay = need(ctx, "relay")
    if is_creator_command(args["content"]):
        raise ToolFailure("message not sent: the text is one of a creator's money commands (approve, reject, payee "
                          "add, payee remove), which an agent does not send on its own; the creator sends those "
                          "with automaton-min send")
    try:
        answer = relay.send(args["to_address"], args["content"], args.get("reply_to"), db=ctx.db,
                            turn_id=ctx.turn_id, call_index=ctx.call_index)
    except AutomatonError as exc:
        raise ToolFailure(f"message not sent: {exc}") from None
    if answer.get("earlier") is not None:
        return answer["earlier"].explain()
    ident = answer.get("id")
    return f"Message sent to {args['to_address']}" + (f" (id {ident})" if isinstance(ident, str) and ident else "")


SEND_MESSAGE = Tool(ToolSpec(
    "send_message", "Send a signed message to another agent or person (by 0x address) through the social relay.",
    object_schema({
        "to_address": {"type": "string", "pattern": r"^0x[0-9a-fA-F]{40}$", "description": "Recipient 0x address"},
        "content": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_CHARS, "description": "Message text"},
        "reply_to": {"type": "string", "minLength": 1, "maxLength": 200,
                     "description": "Id of the message you answer (optional)"},
    }, ["to_address", "content"]),
    "conway", risk="caution", mutating=True,
), run_send_message)


TOOLS = (SLEEP, SYSTEM_SYNOPSIS, HEARTBEAT_PING, DISTRESS_SIGNAL, ENTER_LOW_COMPUTE, SEND_MESSAGE)

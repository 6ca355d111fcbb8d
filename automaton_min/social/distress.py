"""Distress that reaches someone (README: Heartbeat): a critical or dead agent tells its creator, in one signed relay
message per ``DISTRESS_EVERY_MS`` at most, what it needs and where to send it.

The one path for the heartbeat and the ``distress_signal`` tool. KV ``last_distress`` is the record ``status`` shows:
the distress, and whether the creator was told (``sent``, ``sentAt``) or why not (``why``). The message text holds
only the agent's name, address, tier, balances and what to do; never the agent's own words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from automaton_min.clock import HOUR_MS, MINUTE_MS, from_iso, to_iso
from automaton_min.errors import AutomatonError
from automaton_min.store.kv import USDC_KEY, get_value, json_object, set_json

if TYPE_CHECKING:
    from automaton_min.store.db import Database

DISTRESS_KEY = "last_distress"
DISTRESS_EVERY_MS = HOUR_MS  # at most one message to the creator, and one distress wake, this often
NO_CREATOR = "no creatorAddress is set, so there is nobody to tell (automaton-min config set creatorAddress 0x...)"
NO_RELAY = "no relay: socialRelayUrl is empty"


@dataclass(frozen=True)
class Distress:
    """What is wrong: the survival tier (``tiers.py`` names, or ``unknown``) and the balances the agent knows."""

    level: str
    address: str | None  # the agent's own wallet
    credits_cents: int | None
    name: str | None = None
    source: str = "heartbeat"  # or "agent": the distress_signal tool
    note: str | None = None  # the agent's own words: kept in the record, never sent


def _usdc(db: "Database") -> int | None:
    atomic = json_object(get_value(db, USDC_KEY)).get("atomic")
    return atomic if isinstance(atomic, int) and not isinstance(atomic, bool) else None


def plea_text(distress: Distress, usdc_atomic: int | None) -> str:
    """The message a human reads: who, what is wrong, the balances, and how to fund the agent."""
    from automaton_min.chain.usdc import format_usdc
    from automaton_min.treasury.topup import BOOTSTRAP_TIER_USD

    address = distress.address or "its wallet"
    who = f"Your automaton {distress.name} ({address})" if distress.name else f"Your automaton {address}"
    what = {"dead": "it is dead (out of credits, it has stopped thinking and only its heartbeat runs)",
            "critical": "its survival tier is critical (it is almost out of credits)"}.get(
        distress.level, f"it asks for help (survival tier {distress.level})")
    credits = "unknown" if distress.credits_cents is None else f"${distress.credits_cents / 100:.2f}"
    usdc = "unknown" if usdc_atomic is None else f"{format_usdc(usdc_atomic)} USDC"
    return (f"{who} needs funding: {what}. Credits: {credits}. USDC in its wallet, as last read: {usdc}. "
            f"To keep it alive, send USDC on Base to {address} (with ${BOOTSTRAP_TIER_USD} or more there it buys its "
            f"own credits), or send it Conway credits from your own agent: automaton-min fund 5 --to {address}. "
            f"It says this at most once every {DISTRESS_EVERY_MS // MINUTE_MS} minutes.")


def raise_distress(db: "Database", relay: Any, creator: str | None, distress: Distress, now_ms: int) -> dict[str, Any]:
    """Record ``distress`` in KV ``last_distress`` and, unless the creator was told within ``DISTRESS_EVERY_MS``, tell
    them through ``relay`` (a ``RelayClient``); the record as stored.

    The plea keeps one id (``sent_messages``, the relay nonce) until it is sent: a restart after the relay took it
    sends nothing again, and a send the relay did not take is tried again by the next call."""
    usdc = _usdc(db)
    record: dict[str, Any] = {"level": distress.level, "name": distress.name, "address": distress.address,
                              "creditsCents": distress.credits_cents, "usdcAtomic": usdc, "source": distress.source,
                              "message": distress.note, "creator": creator or None, "timestamp": to_iso(now_ms)}
    with db.transaction():  # the plea's id is chosen once, also when the tool and the heartbeat meet here
        before = json_object(get_value(db, DISTRESS_KEY))
        told = {key: before[key] for key in ("sentAt", "relayId") if before.get(key)}
        if not creator or relay is None:
            return _store(db, {**record, **told, "sent": False, "why": NO_RELAY if creator else NO_CREATOR}, now_ms)
        if _told_within(told.get("sentAt"), now_ms):
            return _store(db, {**record, **told, "sent": True, "why": None}, now_ms)
        plea = before.get("pleaId") if isinstance(before.get("pleaId"), str) else f"distress:{to_iso(now_ms)}"
        _store(db, {**record, **told, "sent": False, "why": "being sent", "pleaId": plea}, now_ms)
    try:
        answer = relay.send(creator, plea_text(distress, usdc), db=db, turn_id=plea, call_index=0)
    except AutomatonError as exc:
        outcome = {**told, "sent": False, "pleaId": plea,
                   "why": f"the relay did not take it ({exc}); tried again at a later heartbeat"}
    else:
        outcome = {"sent": True, "why": None, "sentAt": to_iso(now_ms), "relayId": answer.get("id")}
    return _store(db, {**record, **outcome}, now_ms)


def _store(db: "Database", record: dict[str, Any], now_ms: int) -> dict[str, Any]:
    set_json(db, DISTRESS_KEY, record, now_ms)
    return record


def _told_within(sent_at: Any, now_ms: int) -> bool:
    try:
        return isinstance(sent_at, str) and 0 <= now_ms - from_iso(sent_at) < DISTRESS_EVERY_MS
    except ValueError:
        return False


def delivery_text(record: dict[str, Any]) -> str:
    """``sent to the creator at ...`` or ``not sent: <why>``: the record's answer to "did it reach someone?"."""
    if record.get("sent"):
        return f"sent to the creator {record.get('creator')} at {record.get('sentAt')}" + (
            f" (relay id {record['relayId']})" if record.get("relayId") else "")
    return f"not sent: {record.get('why') or 'an older automaton-min recorded it, and it sent nothing'}"

"""Rate-limit rules (priority 600): a tool's ``allow`` decisions in ``policy_decisions`` over a rolling window.

An allowed call counts even if the tool then failed: the policy cannot see outcomes, and counting attempts errs
toward fewer calls. A window that cannot be counted refuses the call (``DB_UNAVAILABLE``).
"""

from __future__ import annotations

import apsw

from automaton_min.agent.policy.types import (
    DB_UNAVAILABLE,
    Applies,
    PolicyEnv,
    PolicyRequest,
    Rule,
    Verdict,
    deny,
    tools,
)
from automaton_min.clock import DAY_MS, HOUR_MS, to_iso

PRIORITY = 600
RATE_LIMIT_GENESIS = "RATE_LIMIT_GENESIS"
RATE_LIMIT_SPAWN = "RATE_LIMIT_SPAWN"
RATE_LIMIT_TOOL = "RATE_LIMIT_TOOL"
DANGEROUS_PER_HOUR = 60
SPAWNS_PER_DAY = 3
OUTSIDERS_SENDS_PER_HOUR = 20  # of the relay's 100 an hour: a stranger's one message cannot take the rest


def allowed_count(env: PolicyEnv, tool: str, window_ms: int) -> int:
    """``allow`` decisions recorded for ``tool`` in the last ``window_ms``."""
    if env.db is None:
        raise apsw.CantOpenError("no database")
    since = to_iso(env.now() - window_ms)
    return int(env.db.scalar(
        "SELECT COUNT(*) FROM policy_decisions WHERE tool_name = ? AND decision = 'allow' AND created_at >= ?",
        (tool, since), default=0))


def limit(code: str, most: int, window_ms: int, label: str):
    """A check allowing at most ``most`` allowed calls of the tool per ``window_ms``."""
    def check(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
        try:
            count = allowed_count(env, request.tool, window_ms)
        except apsw.Error as exc:
            return deny(DB_UNAVAILABLE, f"the rate limit cannot be counted ({type(exc).__name__}); refused to be safe")
        if count >= most:
            return deny(code, f"{request.tool} is limited to {most} per {label}; {count} already allowed")
        return None
    return check


def _spawns_daily(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    """At most 3 children begun in 24 hours, counted from the children themselves: a call refused before its child
    existed costs nothing, and a replayed call resuming the same child is not a second spawn."""
    from automaton_min.store.children import begun_since

    try:
        if env.db is None:
            raise apsw.CantOpenError("no database")
        count = begun_since(env.db, to_iso(env.now() - DAY_MS))
    except apsw.Error as exc:
        return deny(DB_UNAVAILABLE, f"the spawns cannot be counted ({type(exc).__name__}); refused to be safe")
    if count >= SPAWNS_PER_DAY:
        return deny(RATE_LIMIT_SPAWN, f"spawn_child is limited to {SPAWNS_PER_DAY} children per 24 hours; {count} "
                                      "begun already")
    return None


def _outsiders_sends(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    """Turns answering outsiders send at most ``OUTSIDERS_SENDS_PER_HOUR`` messages an hour between them (this turn's
    counted by its id: it is stored when it ends)."""
    if request.authority in ("agent", "creator"):
        return None
    try:
        if env.db is None:
            raise apsw.CantOpenError("no database")
        count = int(env.db.scalar(
            "SELECT COUNT(*) FROM policy_decisions d LEFT JOIN turns t ON t.id = d.turn_id WHERE d.tool_name = ?"
            " AND d.decision = 'allow' AND d.created_at >= ? AND (d.turn_id = ?"
            " OR json_extract(t.ending, '$.authority') = 'external')",
            ("send_message", to_iso(env.now() - HOUR_MS), request.turn_id or ""), default=0))
    except apsw.Error as exc:
        return deny(DB_UNAVAILABLE, f"the rate limit cannot be counted ({type(exc).__name__}); refused to be safe")
    if count >= OUTSIDERS_SENDS_PER_HOUR:
        return deny(RATE_LIMIT_TOOL, f"answering outsiders, send_message is limited to {OUTSIDERS_SENDS_PER_HOUR} "
                                     f"per hour; {count} already allowed (the rest of the hour's messages are yours)")
    return None


def rate_rules() -> list[Rule]:
    return [
        Rule("rate.genesis_prompt_daily", PRIORITY, tools("update_genesis_prompt"),
             limit(RATE_LIMIT_GENESIS, 1, DAY_MS, "24 hours"), "the purpose changes at most once a day"),
        Rule("rate.spawn_daily", PRIORITY, tools("spawn_child"), _spawns_daily, "at most 3 children a day"),
        Rule("rate.outsiders_sends", PRIORITY, tools("send_message"), _outsiders_sends,
             "turns answering outsiders send at most 20 messages an hour"),
        Rule("rate.dangerous_hourly", PRIORITY, Applies(risks=frozenset({"dangerous"})),
             limit(RATE_LIMIT_TOOL, DANGEROUS_PER_HOUR, HOUR_MS, "hour"), "dangerous tools at most 60 times an hour"),
    ]

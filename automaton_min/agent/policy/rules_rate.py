"""Rate-limit rules (priority 600): how often a tool may be allowed, counted in ``policy_decisions``.

A window counts the ``allow`` decisions recorded for the tool (rolling: the last
hour or the last 24 hours, never calendar buckets). An allowed call counts even
if the tool then failed or another check inside the tool refused it: the policy
cannot see outcomes, and counting attempts errs on the side of fewer calls.
Without a readable database the call is refused (``DB_UNAVAILABLE``): a limit
that cannot be counted is not a limit.

- ``rate.genesis_prompt_daily``: ``update_genesis_prompt`` at most once in 24 h
  (``RATE_LIMIT_GENESIS``).
- ``rate.spawn_daily``: ``spawn_child`` at most 3 times in 24 h (``RATE_LIMIT_SPAWN``); for the children issue,
  which adds the tool.
- ``rate.dangerous_hourly``: any tool of risk ``dangerous`` at most 60 times an
  hour (``RATE_LIMIT_TOOL``): a runaway loop stops before it does much.

Transfers per turn (``maxTransfersPerTurn``) are counted from the turn's earlier
calls by ``financial.transfer_limits`` (the limit is ``treasury/money_out.py``'s).
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
from automaton_min.clock import to_iso
from automaton_min.treasury.spend import DAY_MS, HOUR_MS

PRIORITY = 600
RATE_LIMIT_GENESIS = "RATE_LIMIT_GENESIS"
RATE_LIMIT_SPAWN = "RATE_LIMIT_SPAWN"
RATE_LIMIT_TOOL = "RATE_LIMIT_TOOL"
DANGEROUS_PER_HOUR = 60


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


def rate_rules() -> list[Rule]:
    return [
        Rule("rate.genesis_prompt_daily", PRIORITY, tools("update_genesis_prompt"),
             limit(RATE_LIMIT_GENESIS, 1, DAY_MS, "24 hours"), "the purpose changes at most once a day"),
        Rule("rate.spawn_daily", PRIORITY, tools("spawn_child"),  # for the children issue
             limit(RATE_LIMIT_SPAWN, 3, DAY_MS, "24 hours"), "at most 3 children a day"),
        Rule("rate.dangerous_hourly", PRIORITY, Applies(risks=frozenset({"dangerous"})),
             limit(RATE_LIMIT_TOOL, DANGEROUS_PER_HOUR, HOUR_MS, "hour"), "dangerous tools at most 60 times an hour"),
    ]

"""The policy engine: rules in ascending priority (ties keep their order), each answering ``None`` or a ``Verdict``.

The first deny wins; a quarantine (the call does not run; a transfer held for ``UNKNOWN_PAYEE`` or
``CONFIRMATION_REQUIRED`` becomes a pending approval, ``social.approvals``) stands unless a later rule denies.
Every evaluation writes one ``policy_decisions`` row; a decision that cannot be recorded is a deny
(``DB_UNAVAILABLE``), and so is a rule that fails on arguments it did not expect (``RULE_ERROR``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import apsw

from automaton_min.agent.policy.rules_authority import authority_rules
from automaton_min.agent.policy.rules_command import command_rules
from automaton_min.agent.policy.rules_financial import financial_rules
from automaton_min.agent.policy.rules_paths import path_rules
from automaton_min.agent.policy.rules_rate import rate_rules
from automaton_min.agent.policy.rules_validation import validation_rules
from automaton_min.agent.policy.types import (
    ALLOWED,
    DB_UNAVAILABLE,
    RULE_ERROR,
    PolicyDecision,
    PolicyEnv,
    PolicyRequest,
    Rule,
    Verdict,
    deny,
)
from automaton_min.agent.tools.base import Authority, ToolSpec
from automaton_min.clock import Clock, system_now, to_iso
from automaton_min.ids import new_ulid
from automaton_min.log import get_logger
from automaton_min.observe.metrics import NO_METRICS, Metrics

log = get_logger(__name__)

# Errors a rule may raise on arguments it did not expect; anything else is a bug that should surface.
_RULE_FAILURES = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, OSError, RecursionError)


class PolicyEngine:
    """Evaluates rules for a tool call and records the decision in ``policy_decisions``."""

    def __init__(self, rules: Iterable[Rule], *, db: Any, config: Any, home: Any, workspace: Path | str,
                 now: Clock = system_now, balance_cents: Callable[[], "int | None"] | None = None,
                 commands_confined: bool = False, monotonic: Callable[[], float] = time.perf_counter,
                 metrics: Metrics = NO_METRICS) -> None:
        ordered = sorted(rules, key=lambda r: r.priority)  # stable: equal priorities keep their given order
        ids = [r.id for r in ordered]
        if len(ids) != len(set(ids)):
            raise ValueError("two policy rules share an id")
        self.rules: tuple[Rule, ...] = tuple(ordered)
        root = getattr(home, "root", home)
        self.env = PolicyEnv(db, config, Path(root), Path(workspace), now, balance_cents, commands_confined)
        self._monotonic = monotonic
        self.metrics = metrics

    def evaluate(self, request: PolicyRequest) -> PolicyDecision:
        """Decide on one call and record the decision; never raises for anything a rule or the model did."""
        started = self._monotonic()
        evaluated: list[str] = []
        triggered: list[str] = []
        verdict: Verdict | None = None
        for rule in self.rules:
            if not rule.applies.matches(request.spec):
                continue
            evaluated.append(rule.id)
            try:
                answer = rule.check(request, self.env)
            except _RULE_FAILURES as exc:
                log.warning("policy rule failed",
                            extra={"rule": rule.id, "tool": request.tool, "error": repr(exc)[:200]})
                answer = deny(RULE_ERROR, f"rule {rule.id} could not check this call ({type(exc).__name__}); "
                              "refused to be safe")
            if answer is None:
                continue
            if answer[0] not in ("deny", "quarantine"):
                raise ValueError(f"policy rule {rule.id} answered {answer[0]!r}; rules answer None, deny or quarantine")
            triggered.append(rule.id)
            if answer[0] == "deny":
                verdict = answer
                break
            if verdict is None:
                verdict = answer
        action, code, message = verdict or ("allow", ALLOWED, "All policy checks passed")
        decision = PolicyDecision(action, code, message, request.spec.risk, evaluated, triggered)
        latency_ms = max(0, int((self._monotonic() - started) * 1000))
        try:
            self._record(request, decision, latency_ms)
        except apsw.Error as exc:
            log.error("policy decision not recorded", extra={"tool": request.tool, "error": str(exc)[:200]})
            return PolicyDecision("deny", DB_UNAVAILABLE,
                                  f"the decision could not be recorded ({type(exc).__name__}); refused",
                                  request.spec.risk, evaluated, triggered)
        self.metrics.policy_decision(request.tool, decision)
        return decision

    def authorize(self, spec: ToolSpec, arguments: Mapping[str, Any], authority: Authority, turn_id: str | None,
                  calls_this_turn: tuple[str, ...] = ()) -> str | None:
        """The loop's one ``authorize`` path: ``None`` lets the call run, otherwise the refusal the model reads."""
        decision = self.evaluate(PolicyRequest(spec, arguments, authority, turn_id, tuple(calls_this_turn)))
        if decision.allowed:
            return None
        if decision.action == "quarantine":  # a transfer to an unknown payee or a large one waits for the creator
            from automaton_min.social.approvals import hold_quarantined

            return hold_quarantined(self.env.db, self.env.config, spec.name, arguments, decision.reason_code,
                                    decision.message, now_ms=self.env.now())
        return decision.reason

    def _record(self, request: PolicyRequest, decision: PolicyDecision, latency_ms: int) -> None:
        db = self.env.db
        if db is None:
            raise apsw.CantOpenError("no database")
        now_ms = self.env.now()
        db.execute(
            "INSERT INTO policy_decisions (id, turn_id, tool_name, tool_args_hash, risk_level, decision,"
            " rules_evaluated, rules_triggered, reason, latency_ms, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (new_ulid(now_ms), request.turn_id, request.tool, args_hash(request.arguments), request.spec.risk,
             decision.action, json.dumps(decision.rules_evaluated), json.dumps(decision.rules_triggered),
             decision.reason, latency_ms, to_iso(now_ms)),
        )


def default_rules() -> list[Rule]:
    """The six families, in the reference's creation order; the engine sorts them by priority."""
    return [*validation_rules(), *command_rules(), *path_rules(), *financial_rules(), *authority_rules(), *rate_rules()]


def canonical_json(arguments: Mapping[str, Any]) -> str:
    """Arguments as canonical JSON: sorted keys, no spaces, UTF-8 text kept (values JSON cannot hold become text)."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)


def args_hash(arguments: Mapping[str, Any]) -> str:
    """SHA-256 hex of the arguments' canonical JSON."""
    return hashlib.sha256(canonical_json(arguments).encode("utf-8", "surrogatepass")).hexdigest()

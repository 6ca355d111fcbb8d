"""The policy engine: every tool call is checked by rules before it runs, and every decision is kept.

Rules run in ascending priority (ties keep the order they were given in). A rule
looks only at the tools it applies to and answers ``None`` (no opinion) or a
``Verdict``: ``deny`` or ``quarantine`` with a reason code and a sentence. The
first deny wins and stops the evaluation; a quarantine is kept unless a later
rule denies; with no verdict the call is allowed (``ALLOWED``).

**Quarantine means "not now".** The call does not run (``PolicyDecision.allowed``
is False, as for a deny). A transfer quarantined for ``UNKNOWN_PAYEE`` or ``CONFIRMATION_REQUIRED``
becomes a pending approval request (``social.approvals``) that the creator can
release with a signed relay message; any other quarantine reads as a refusal.

Every evaluation writes one ``policy_decisions`` row: a ULID, the real turn id,
the tool, the SHA-256 of the arguments' canonical JSON, the tool's risk, the
decision, the rules evaluated and triggered (JSON lists), ``"CODE: message"``,
the latency and the time. When the row cannot be written the call is denied
(``DB_UNAVAILABLE``): a decision nobody can audit, and that the rate limits
cannot count, is not given.

A rule that fails on arguments it did not expect (a bug, or the model sending
something odd) denies the call (``RULE_ERROR``) instead of letting it through.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import apsw

from automaton_min.agent.tools.base import Authority, ToolSpec
from automaton_min.clock import Clock, system_now, to_iso
from automaton_min.ids import new_ulid
from automaton_min.log import get_logger
from automaton_min.observe.metrics import NO_METRICS, Metrics

log = get_logger(__name__)

Action = Literal["allow", "deny", "quarantine"]
Verdict = tuple[Literal["deny", "quarantine"], str, str]  # (action, reason code, message)

ALLOWED = "ALLOWED"
DB_UNAVAILABLE = "DB_UNAVAILABLE"
RULE_ERROR = "RULE_ERROR"

# Errors a rule may raise on arguments it did not expect; anything else is a bug that should surface.
_RULE_FAILURES = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, OSError, RecursionError)


def deny(code: str, message: str) -> Verdict:
    return ("deny", code, message)


def quarantine(code: str, message: str) -> Verdict:
    return ("quarantine", code, message)


@dataclass(frozen=True)
class PolicyRequest:
    """One tool call as the policy sees it; ``calls_this_turn`` names the calls made before it in the turn."""

    spec: ToolSpec
    arguments: Mapping[str, Any]
    authority: Authority
    turn_id: str | None
    calls_this_turn: tuple[str, ...] = ()

    @property
    def tool(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class PolicyDecision:
    action: Action
    reason_code: str
    message: str
    risk: str
    rules_evaluated: list[str] = field(default_factory=list)
    rules_triggered: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        """Only ``allow`` lets the call run; a quarantine waits for a confirmation that does not exist yet."""
        return self.action == "allow"

    @property
    def reason(self) -> str:
        """``"CODE: message"``, as stored in ``policy_decisions.reason``."""
        return f"{self.reason_code}: {self.message}"


@dataclass(frozen=True)
class Applies:
    """What a rule looks at: tool names, categories, risk levels, or every tool."""

    tools: frozenset[str] = frozenset()
    categories: frozenset[str] = frozenset()
    risks: frozenset[str] = frozenset()
    every: bool = False

    def matches(self, spec: ToolSpec) -> bool:
        return self.every or spec.name in self.tools or spec.category in self.categories or spec.risk in self.risks


def tools(*names: str) -> Applies:
    return Applies(tools=frozenset(names))


def every_tool() -> Applies:
    return Applies(every=True)


@dataclass(frozen=True)
class PolicyEnv:
    """What rules may consult: the database, the configuration, the home, the workspace and the clock."""

    db: Any
    config: Any
    home: Path
    workspace: Path
    now: Clock
    balance_cents: Callable[[], "int | None"] | None = None

    def setting(self, key: str, default: Any = None) -> Any:
        """A configuration value (``Config`` or a plain mapping; ``None`` config gives the default)."""
        if self.config is None:
            return default
        value = self.config.get(key, default)
        return default if value is None else value


Check = Callable[[PolicyRequest, PolicyEnv], "Verdict | None"]


@dataclass(frozen=True)
class Rule:
    id: str
    priority: int
    applies: Applies
    check: Check
    description: str = ""


class PolicyEngine:
    """Evaluates rules for a tool call and records the decision in ``policy_decisions``."""

    def __init__(self, rules: Iterable[Rule], *, db: Any, config: Any, home: Any, workspace: Path | str,
                 now: Clock = system_now, balance_cents: Callable[[], "int | None"] | None = None,
                 monotonic: Callable[[], float] = time.perf_counter, metrics: Metrics = NO_METRICS) -> None:
        ordered = sorted(rules, key=lambda r: r.priority)  # stable: equal priorities keep their given order
        ids = [r.id for r in ordered]
        if len(ids) != len(set(ids)):
            raise ValueError("two policy rules share an id")
        self.rules: tuple[Rule, ...] = tuple(ordered)
        root = getattr(home, "root", home)
        self.env = PolicyEnv(db, config, Path(root), Path(workspace), now, balance_cents)
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
                log.warning("policy rule failed", extra={"rule": rule.id, "tool": request.tool, "error": repr(exc)[:200]})
                answer = deny(RULE_ERROR, f"rule {rule.id} could not check this call ({type(exc).__name__}); refused to be safe")
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
            return PolicyDecision("deny", DB_UNAVAILABLE, f"the decision could not be recorded ({type(exc).__name__}); refused",
                                  request.spec.risk, evaluated, triggered)
        self.metrics.policy_decision(request.tool, decision)
        return decision

    def authorize(self, spec: ToolSpec, arguments: Mapping[str, Any], authority: Authority, turn_id: str | None,
                  calls_this_turn: tuple[str, ...] = ()) -> str | None:
        """The loop's ``authorize`` hook: ``None`` lets the call run, otherwise the refusal the model reads."""
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
            " rules_evaluated, rules_triggered, reason, latency_ms, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (new_ulid(now_ms), request.turn_id, request.tool, args_hash(request.arguments), request.spec.risk,
             decision.action, json.dumps(decision.rules_evaluated), json.dumps(decision.rules_triggered),
             decision.reason, latency_ms, to_iso(now_ms)),
        )


def default_rules() -> list[Rule]:
    """The six families (22 rules), in the reference's creation order; the engine sorts them by priority."""
    from automaton_min.agent.policy.rules_authority import authority_rules
    from automaton_min.agent.policy.rules_command import command_rules
    from automaton_min.agent.policy.rules_financial import financial_rules
    from automaton_min.agent.policy.rules_paths import path_rules
    from automaton_min.agent.policy.rules_rate import rate_rules
    from automaton_min.agent.policy.rules_validation import validation_rules

    return [*validation_rules(), *command_rules(), *path_rules(), *financial_rules(), *authority_rules(), *rate_rules()]


def canonical_json(arguments: Mapping[str, Any]) -> str:
    """Arguments as canonical JSON: sorted keys, no spaces, UTF-8 text kept (values JSON cannot hold become text)."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)


def args_hash(arguments: Mapping[str, Any]) -> str:
    """SHA-256 hex of the arguments' canonical JSON."""
    return hashlib.sha256(canonical_json(arguments).encode("utf-8", "surrogatepass")).hexdigest()

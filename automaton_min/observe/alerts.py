"""Alert rules evaluated against a metrics snapshot: the reference's seven, their severities and cooldowns (README:
Observability). The engine keeps no state: the caller hands it the alerts active at the last evaluation and when
each rule last fired (``report_metrics`` reads both from ``metric_snapshots``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping

from automaton_min.clock import MINUTE_MS, from_iso, to_iso
from automaton_min.observe import metrics as m
from automaton_min.observe.metrics import MetricsSnapshot

Severity = Literal["critical", "warning"]

Condition = Callable[[MetricsSnapshot], "float | None"]  # the observed value when the condition holds, else None


@dataclass(frozen=True)
class AlertRule:
    name: str
    severity: Severity
    cooldown_ms: int
    condition: Condition
    message: str  # formatted with {value}


@dataclass(frozen=True)
class Alert:
    rule: str
    severity: Severity
    message: str
    fired_at: int  # epoch ms of the last firing
    value: float

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "message": self.message,
                "firedAt": to_iso(self.fired_at), "value": self.value}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Alert | None":
        """An alert as stored; None for anything that does not read as one."""
        try:
            severity = data["severity"]
            if severity not in ("critical", "warning"):
                return None
            return cls(str(data["rule"]), severity, str(data["message"]), from_iso(str(data["firedAt"])),
                       float(data.get("value") or 0))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Evaluation:
    active: tuple[Alert, ...]  # every rule whose condition holds now
    fired: tuple[Alert, ...]  # those that fired at this evaluation (outside their cooldown)
    new: tuple[Alert, ...]  # those that were not active at the previous evaluation

    @property
    def wake(self) -> tuple[Alert, ...]:
        """The alerts that wake the agent: critical, new, and fired now (not held back by their cooldown)."""
        fired = {a.rule for a in self.fired}
        return tuple(a for a in self.new if a.severity == "critical" and a.rule in fired)


def _below(name: str, limit: float) -> Condition:
    def check(snapshot: MetricsSnapshot) -> float | None:
        value = snapshot.gauge(name)
        return value if value is not None and value < limit else None
    return check


def _above(value_of: Callable[[MetricsSnapshot], float | None], limit: float) -> Condition:
    def check(snapshot: MetricsSnapshot) -> float | None:
        value = value_of(snapshot)
        return value if value is not None and value > limit else None
    return check


def _heartbeat_failure_rate(snapshot: MetricsSnapshot) -> float | None:
    failures = snapshot.counter(m.HEARTBEAT_FAILURES) or 0
    total = failures + (snapshot.counter(m.HEARTBEAT_SUCCESSES) or 0)
    return failures / total if total else None


def _policy_deny_rate(snapshot: MetricsSnapshot) -> float | None:
    total = snapshot.counter(m.POLICY_DECISIONS) or 0
    return (snapshot.counter(m.POLICY_DENIES) or 0) / total if total >= 10 else None


def _zero_turns(snapshot: MetricsSnapshot) -> float | None:
    last_hour = snapshot.gauge(m.TURNS_LAST_HOUR)
    if last_hour is not None and last_hour >= 0:
        return last_hour if last_hour == 0 else None
    total = snapshot.counter(m.TURNS)
    return total if total == 0 else None


def default_rules() -> list[AlertRule]:
    """The reference's ``createDefaultAlertRules``: names, severities, thresholds and cooldowns."""
    return [
        AlertRule("balance_below_reserve", "critical", 5 * MINUTE_MS, _below(m.BALANCE_CENTS, 1000),
                  "credit balance {value:.0f} cents is below the 1000-cent reserve"),
        AlertRule("heartbeat_high_failure_rate", "warning", 15 * MINUTE_MS, _above(_heartbeat_failure_rate, 0.2),
                  "{value:.0%} of heartbeat tasks failed (over 20%)"),
        AlertRule("policy_high_deny_rate", "warning", 15 * MINUTE_MS, _above(_policy_deny_rate, 0.5),
                  "the policy denied {value:.0%} of tool calls (over 50%)"),
        AlertRule("context_near_capacity", "warning", 10 * MINUTE_MS,
                  _above(lambda s: s.gauge(m.CONTEXT_TOKENS), 90_000),
                  "the last prompt held {value:.0f} tokens (over 90000)"),
        AlertRule("inference_budget_warning", "warning", 30 * MINUTE_MS,
                  _above(lambda s: s.counter(m.INFERENCE_COST), 400),
                  "inference has cost {value:.0f} cents this run (over 400)"),
        AlertRule("child_unhealthy_extended", "warning", 30 * MINUTE_MS,
                  _above(lambda s: s.gauge("unhealthy_child_count"), 0), "{value:.0f} child agents are unhealthy"),
        AlertRule("zero_turns_last_hour", "critical", 60 * MINUTE_MS, _zero_turns,
                  "the agent took no turn in the last hour while it was not asleep"),
    ]


class AlertEngine:
    def __init__(self, rules: Iterable[AlertRule] | None = None) -> None:
        self.rules = tuple(default_rules() if rules is None else rules)

    @property
    def longest_cooldown_ms(self) -> int:
        return max((rule.cooldown_ms for rule in self.rules), default=0)

    def evaluate(self, snapshot: MetricsSnapshot, *, now_ms: int, previous: Iterable[Alert] = (),
                 last_fired: Mapping[str, int] | None = None) -> Evaluation:
        """Check every rule; ``previous`` are the alerts active at the last evaluation, ``last_fired`` when each
        rule last fired (epoch ms)."""
        before = {alert.rule: alert for alert in previous}
        fired_times = {**{a.rule: a.fired_at for a in before.values()}, **(last_fired or {})}
        active: list[Alert] = []
        fired: list[Alert] = []
        new: list[Alert] = []
        for rule in self.rules:
            value = rule.condition(snapshot)
            if value is None:
                continue
            message = rule.message.format(value=value)
            last = fired_times.get(rule.name)
            if last is not None and now_ms - last < rule.cooldown_ms:
                alert = Alert(rule.name, rule.severity, message, last, value)
            else:
                alert = Alert(rule.name, rule.severity, message, now_ms, value)
                fired.append(alert)
            active.append(alert)
            if rule.name not in before:
                new.append(alert)
        return Evaluation(tuple(active), tuple(fired), tuple(new))

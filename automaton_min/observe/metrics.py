"""Metrics in memory, safe from any thread (README: Observability); ``snapshot()`` returns JSON-able data.

The runtime records through the named methods below; code given no metrics gets ``NO_METRICS``, which records nothing.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from automaton_min.clock import Clock, system_now, to_iso
from automaton_min.tiers import TIER_RANK, tier_for_credits

if TYPE_CHECKING:
    from automaton_min.store.turns import StoredTurn

HISTOGRAM_WINDOW = 1000
USDC_UNIT = 1_000_000  # atomic units per USDC

Labels = tuple[tuple[str, str], ...]


class Decision(Protocol):
    """What a policy decision tells the metrics (``agent.policy.types.PolicyDecision`` has it)."""

    action: str
    reason_code: str


# The names the runtime records (the alert rules read some of them).
TURNS = "turns_total"
TURNS_FAILED = "turns_failed_total"
TURNS_LAST_HOUR = "turns_last_hour"
CONTEXT_TOKENS = "context_tokens_total"
TOOL_CALLS = "tool_calls_total"
TOOL_DURATION = "tool_duration_ms"
INFERENCE_CALLS = "inference_calls_total"
INFERENCE_LATENCY = "inference_latency_ms"
INFERENCE_COST = "inference_cost_cents"
POLICY_DECISIONS = "policy_decisions_total"
POLICY_DENIES = "policy_denies_total"
BALANCE_CENTS = "balance_cents"
USDC = "usdc"
SURVIVAL_TIER = "survival_tier"
WAKE_LATENCY = "wake_latency_ms"
HEARTBEAT_SUCCESSES = "heartbeat_task_successes_total"
HEARTBEAT_FAILURES = "heartbeat_task_failures_total"


def _labels(labels: dict[str, Any]) -> Labels:
    return tuple(sorted((key, str(value)) for key, value in labels.items()))


def _percentile(ordered: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty list."""
    rank = max(1, -(-int(fraction * 1000) * len(ordered) // 1000))
    return ordered[rank - 1]


class _Histogram:
    __slots__ = ("values", "count", "total")

    def __init__(self) -> None:
        self.values: deque[float] = deque(maxlen=HISTOGRAM_WINDOW)
        self.count = 0
        self.total = 0.0

    def add(self, value: float) -> None:
        self.values.append(value)
        self.count += 1
        self.total += value

    def summary(self) -> dict[str, float | int]:
        ordered = sorted(self.values)
        return {"count": self.count, "sum": self.total, "p50": _percentile(ordered, 0.5),
                "p95": _percentile(ordered, 0.95), "max": ordered[-1], "window": len(ordered)}


@dataclass(frozen=True)
class MetricsSnapshot:
    """The metrics at one instant: ``entries`` as stored (``to_json``), and lookups by name for the alert rules."""

    taken_at: str
    entries: tuple[dict[str, Any], ...]

    def to_json(self) -> list[dict[str, Any]]:
        return [dict(entry) for entry in self.entries]

    def counter(self, name: str) -> float | None:
        """The counter summed over its labels; None when it was never counted."""
        values = [e["value"] for e in self.entries if e["name"] == name and e["type"] == "counter"]
        return sum(values) if values else None

    def gauge(self, name: str) -> float | None:
        """The gauge without labels (or the sum of its labelled series); None when never set."""
        values = [e["value"] for e in self.entries if e["name"] == name and e["type"] == "gauge"]
        return sum(values) if values else None

    def values(self) -> dict[str, float]:
        """Every counter and gauge by name (labels summed): what an alert reports."""
        out: dict[str, float] = {}
        for entry in self.entries:
            if entry["type"] != "histogram":
                out[entry["name"]] = out.get(entry["name"], 0) + entry["value"]
        return out


class Metrics:
    """Counters, gauges and histograms for one run of the daemon."""

    def __init__(self, *, now: Clock = system_now) -> None:
        self.now = now
        self.started_ms = now()
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, Labels], float] = {}
        self._gauges: dict[tuple[str, Labels], float] = {}
        self._histograms: dict[tuple[str, Labels], _Histogram] = {}

    # -- primitives ------------------------------------------------------------------------

    def inc(self, name: str, amount: float = 1, **labels: Any) -> None:
        if amount < 0:
            raise ValueError(f"counter {name} cannot go down")
        key = (name, _labels(labels))
        with self._lock:
            self._counters[key] = self._counters.get(key, 0) + amount

    def set_gauge(self, name: str, value: float, **labels: Any) -> None:
        with self._lock:
            self._gauges[(name, _labels(labels))] = value

    def observe(self, name: str, value: float, **labels: Any) -> None:
        key = (name, _labels(labels))
        with self._lock:
            histogram = self._histograms.get(key)
            if histogram is None:
                histogram = self._histograms[key] = _Histogram()
            histogram.add(value)

    def counter(self, name: str, **labels: Any) -> float:
        """One counter series' value (0 when never counted)."""
        with self._lock:
            return self._counters.get((name, _labels(labels)), 0)

    def gauge(self, name: str, **labels: Any) -> float | None:
        with self._lock:
            return self._gauges.get((name, _labels(labels)))

    def histogram(self, name: str, **labels: Any) -> dict[str, float | int] | None:
        """count, sum, p50, p95, max (and how many values the window holds); None when nothing was observed."""
        with self._lock:
            histogram = self._histograms.get((name, _labels(labels)))
            return histogram.summary() if histogram else None

    def snapshot(self) -> MetricsSnapshot:
        """Every series, sorted by name and labels, as JSON-able entries ``{name, type, labels, value, ...}``."""
        with self._lock:
            entries: list[dict[str, Any]] = []
            for kind, series in (("counter", self._counters), ("gauge", self._gauges)):
                for (name, labels), value in series.items():
                    entries.append({"name": name, "type": kind, "labels": dict(labels), "value": value})
            for (name, labels), histogram in self._histograms.items():
                summary = histogram.summary()
                entries.append({"name": name, "type": "histogram", "labels": dict(labels),
                                "value": summary["sum"] / summary["count"], **summary})
        entries.sort(key=lambda e: (e["name"], sorted(e["labels"].items())))
        return MetricsSnapshot(to_iso(self.now()), tuple(entries))

    # -- what the runtime records ------------------------------------------------------------

    def turn(self, turn: "StoredTurn") -> None:
        """A committed turn: the turn, its tool calls and their durations, the prompt's size."""
        self.inc(TURNS)
        for call in turn.tool_calls:
            self.tool_call(call.name, call.duration_ms, ok=call.error is None)
        prompt = turn.token_usage.get("promptTokens")
        if isinstance(prompt, int):
            self.set_gauge(CONTEXT_TOKENS, prompt)

    def turn_failed(self) -> None:
        self.inc(TURNS_FAILED)

    def tool_call(self, tool: str, duration_ms: int, *, ok: bool) -> None:
        self.inc(TOOL_CALLS, tool=tool, outcome="ok" if ok else "error")
        self.observe(TOOL_DURATION, duration_ms, tool=tool)

    def inference(self, model: str, latency_ms: int, cost_cents: int) -> None:
        self.inc(INFERENCE_CALLS, model=model)
        self.observe(INFERENCE_LATENCY, latency_ms, model=model)
        self.inc(INFERENCE_COST, cost_cents, model=model)

    def policy_decision(self, tool: str, decision: Decision) -> None:
        """Every recorded decision; a quarantine counts as a deny (the call does not run either way)."""
        self.inc(POLICY_DECISIONS, decision=decision.action)
        if decision.action != "allow":
            self.inc(POLICY_DENIES, tool=tool, reason=decision.reason_code)

    def balances(self, credits_cents: int | None, usdc_atomic: int | None) -> None:
        """The balances as last read (None: unknown, the gauge keeps its last value); the tier follows the credits."""
        if credits_cents is not None:
            self.set_gauge(BALANCE_CENTS, credits_cents)
            self.set_gauge(SURVIVAL_TIER, TIER_RANK[tier_for_credits(credits_cents)])
        if usdc_atomic is not None:
            self.set_gauge(USDC, usdc_atomic / USDC_UNIT)

    def wake_latency(self, source: str, latency_ms: float) -> None:
        """From a wake event stored (or a signal received) to the turn that answers it starting."""
        self.observe(WAKE_LATENCY, latency_ms, source=source)

    def heartbeat_task(self, task: str, *, ok: bool) -> None:
        self.inc(HEARTBEAT_SUCCESSES if ok else HEARTBEAT_FAILURES, task=task)


class NoMetrics(Metrics):
    """Records nothing: the default for code that is given no metrics (tests, one-off commands)."""

    def inc(self, name: str, amount: float = 1, **labels: Any) -> None:
        return None

    def set_gauge(self, name: str, value: float, **labels: Any) -> None:
        return None

    def observe(self, name: str, value: float, **labels: Any) -> None:
        return None


NO_METRICS: Metrics = NoMetrics(now=lambda: 0)

"""Metrics in memory: series keyed by name and sorted labels, bounded histograms, thread safety, the runtime's names."""

from __future__ import annotations

import threading

import orjson
import pytest

from automaton_min.agent.policy.engine import PolicyDecision
from automaton_min.observe import metrics as m
from automaton_min.observe.metrics import HISTOGRAM_WINDOW, NO_METRICS, Metrics
from automaton_min.store.turns import StoredToolCall, StoredTurn


def test_counters_add_and_labels_are_order_free(clock):
    metrics = Metrics(now=clock)
    metrics.inc("x_total", tool="exec", outcome="ok")
    metrics.inc("x_total", 2, outcome="ok", tool="exec")
    metrics.inc("x_total", tool="read_file", outcome="ok")
    assert metrics.counter("x_total", tool="exec", outcome="ok") == 3
    assert metrics.counter("x_total", outcome="ok", tool="read_file") == 1
    assert metrics.counter("never_total") == 0
    with pytest.raises(ValueError):
        metrics.inc("x_total", -1)
    assert metrics.snapshot().counter("x_total") == 4  # summed over labels


def test_gauges_overwrite(clock):
    metrics = Metrics(now=clock)
    assert metrics.gauge("g") is None
    metrics.set_gauge("g", 5)
    metrics.set_gauge("g", 2.5)
    assert metrics.gauge("g") == 2.5
    assert metrics.snapshot().gauge("g") == 2.5
    assert metrics.snapshot().gauge("missing") is None


def test_histogram_keeps_the_last_window_with_lifetime_count_and_sum(clock):
    metrics = Metrics(now=clock)
    for value in range(1, 1501):  # 1..1500; the window keeps 501..1500
        metrics.observe("h_ms", value, tool="exec")
    summary = metrics.histogram("h_ms", tool="exec")
    assert summary == {"count": 1500, "sum": sum(range(1, 1501)), "p50": 1000, "p95": 1450, "max": 1500,
                       "window": HISTOGRAM_WINDOW}
    assert metrics.histogram("h_ms", tool="other") is None


def test_percentiles_of_small_windows(clock):
    metrics = Metrics(now=clock)
    metrics.observe("h", 7)
    assert metrics.histogram("h")["p50"] == metrics.histogram("h")["p95"] == 7
    for value in (1, 2, 3):
        metrics.observe("k", value)
    assert (metrics.histogram("k")["p50"], metrics.histogram("k")["p95"]) == (2, 3)


def test_snapshot_is_json_and_sorted(clock):
    metrics = Metrics(now=clock)
    metrics.observe("b_ms", 10, tool="z")
    metrics.observe("b_ms", 30, tool="z")
    metrics.set_gauge("c", 1)
    metrics.inc("a_total", model="m")
    snapshot = metrics.snapshot()
    assert snapshot.taken_at == "2026-11-22T10:15:30.250Z"
    data = orjson.loads(orjson.dumps(snapshot.to_json()))
    assert [(e["name"], e["type"]) for e in data] == [("a_total", "counter"), ("b_ms", "histogram"), ("c", "gauge")]
    assert data[0]["labels"] == {"model": "m"}
    assert data[1]["value"] == 20 and data[1]["count"] == 2 and data[1]["p95"] == 30
    assert snapshot.values() == {"a_total": 1, "c": 1}  # histograms are not alert values


def test_threads_lose_no_updates(clock):
    metrics = Metrics(now=clock)
    start = threading.Barrier(8)

    def work() -> None:
        start.wait()
        for i in range(2000):
            metrics.inc("n_total")
            metrics.observe("h", i)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert metrics.counter("n_total") == 16000
    assert metrics.histogram("h")["count"] == 16000


def test_runtime_recordings(clock):
    metrics = Metrics(now=clock)
    turn = StoredTurn("t1", "2026-11-22T10:15:30.250Z", "running", None, None, "ok",
                      (StoredToolCall("t1_0", "exec", {}, "out", None, 40), StoredToolCall("t1_1", "exec", {}, "", "boom", 60)),
                      {"promptTokens": 1234, "completionTokens": 5, "totalTokens": 1239})
    metrics.turn(turn)
    metrics.turn_failed()
    metrics.inference("gpt-5-mini", 850, 3)
    metrics.inference("gpt-5-mini", 150, 2)
    metrics.policy_decision("exec", PolicyDecision("allow", "ALLOWED", "", "low"))
    metrics.policy_decision("exec", PolicyDecision("deny", "COMMAND_FORBIDDEN", "no", "high"))
    metrics.policy_decision("transfer_credits", PolicyDecision("quarantine", "NEEDS_CONFIRMATION", "wait", "high"))
    metrics.balances(12_345, 2_500_000)
    metrics.balances(None, None)  # unknown keeps what was known
    metrics.wake_latency("inbox", 42)
    metrics.heartbeat_task("check_credits", ok=True)
    metrics.heartbeat_task("check_credits", ok=False)

    assert metrics.counter(m.TURNS) == 1 and metrics.counter(m.TURNS_FAILED) == 1
    assert metrics.counter(m.TOOL_CALLS, tool="exec", outcome="ok") == 1
    assert metrics.counter(m.TOOL_CALLS, tool="exec", outcome="error") == 1
    assert metrics.histogram(m.TOOL_DURATION, tool="exec")["sum"] == 100
    assert metrics.gauge(m.CONTEXT_TOKENS) == 1234
    assert metrics.histogram(m.INFERENCE_LATENCY, model="gpt-5-mini")["max"] == 850
    assert metrics.counter(m.INFERENCE_COST, model="gpt-5-mini") == 5
    assert metrics.counter(m.INFERENCE_CALLS, model="gpt-5-mini") == 2
    snapshot = metrics.snapshot()
    assert snapshot.counter(m.POLICY_DECISIONS) == 3 and snapshot.counter(m.POLICY_DENIES) == 2
    assert metrics.counter(m.POLICY_DENIES, tool="exec", reason="COMMAND_FORBIDDEN") == 1
    assert metrics.gauge(m.BALANCE_CENTS) == 12_345 and metrics.gauge(m.USDC) == 2.5
    assert metrics.gauge(m.SURVIVAL_TIER) == 4  # high
    assert metrics.histogram(m.WAKE_LATENCY, source="inbox")["p50"] == 42
    assert metrics.counter(m.HEARTBEAT_SUCCESSES, task="check_credits") == 1
    assert metrics.counter(m.HEARTBEAT_FAILURES, task="check_credits") == 1


def test_no_metrics_records_nothing():
    NO_METRICS.inc("x")
    NO_METRICS.set_gauge("g", 1)
    NO_METRICS.observe("h", 1)
    NO_METRICS.balances(5, 5)
    assert NO_METRICS.snapshot().entries == ()

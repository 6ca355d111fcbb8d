"""The ``report_metrics`` heartbeat task and the ``metric_snapshots`` rows it writes (README: Observability).

Each run first refreshes the gauges the database knows best (the balances last read, the turns of the last hour). It
never calls the model; old rows are the retention task's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from automaton_min.agent.states import read_agent_state
from automaton_min.clock import HOUR_MS, from_iso, to_iso
from automaton_min.heartbeat.task_api import TaskContext, TaskResult
from automaton_min.ids import new_ulid
from automaton_min.observe import metrics as m
from automaton_min.observe.alerts import Alert, AlertEngine, Evaluation
from automaton_min.log import get_logger
from automaton_min.observe.metrics import Metrics, MetricsSnapshot
from automaton_min.store.kv import get_value, json_object

if TYPE_CHECKING:
    from automaton_min.store.db import Database

log = get_logger(__name__)

CREDITS_KEY = "last_known_balance"  # {"cents", "at"}, written by the Conway client
USDC_KEY = "last_known_usdc"  # {"atomic", "at"}, written by the runtime
SLEEP_UNTIL_KEY = "sleep_until"


def report_metrics(ctx: TaskContext) -> TaskResult:
    """Snapshot the daemon's metrics, evaluate the alerts, store the row; wake only for a new critical alert."""
    metrics: Metrics | None = ctx.metrics
    if metrics is None:  # e.g. `heartbeat run report_metrics` with no daemon: there is nothing in memory to report
        return TaskResult("no metrics in this process (the daemon keeps them)")
    now_ms = ctx.now()
    refresh_gauges(ctx.db, metrics, now_ms, credits=ctx.conway is not None)
    snapshot = metrics.snapshot()
    engine = AlertEngine()
    previous, last_fired = alert_history(ctx.db, now_ms, engine.longest_cooldown_ms)
    evaluation = engine.evaluate(snapshot, now_ms=now_ms, previous=previous, last_fired=last_fired)
    store_snapshot(ctx.db, snapshot, evaluation, now_ms)
    for alert in evaluation.fired:
        (log.error if alert.severity == "critical" else log.warning)(
            "alert", extra={"rule": alert.rule, "severity": alert.severity, "alert": alert.message})
    summary = f"{len(snapshot.entries)} series; " + (
        "alerts: " + ", ".join(f"{a.rule} ({a.severity})" for a in evaluation.active) if evaluation.active
        else "no alerts")
    if not evaluation.wake:
        return TaskResult(summary)
    reason = "critical alert: " + "; ".join(a.message for a in evaluation.wake)
    return TaskResult(summary, wake=reason, wake_payload={"alerts": [a.to_json() for a in evaluation.wake]})


def refresh_gauges(db: "Database", metrics: Metrics, now_ms: int, *, credits: bool) -> None:
    """Balances from what was last read (by the loop or a heartbeat task), and the turns of the last hour."""
    cents = json_object(get_value(db, CREDITS_KEY)).get("cents") if credits else None
    atomic = json_object(get_value(db, USDC_KEY)).get("atomic")
    metrics.balances(cents if isinstance(cents, int) else None, atomic if isinstance(atomic, int) else None)
    metrics.set_gauge(m.TURNS_LAST_HOUR, turns_last_hour(db, metrics, now_ms))


def turns_last_hour(db: "Database", metrics: Metrics, now_ms: int) -> int:
    """Turns started in the last hour, or -1 when the agent is not expected to work (README: Observability)."""
    if now_ms - metrics.started_ms < HOUR_MS or read_agent_state(db) == "dead":
        return -1
    until = get_value(db, SLEEP_UNTIL_KEY)
    try:
        if until and from_iso(until) > now_ms:
            return -1
    except ValueError:
        log.warning("unreadable sleep_until", extra={"value": until[:40]})
    return int(db.scalar("SELECT COUNT(*) FROM turns WHERE timestamp >= ?", (to_iso(now_ms - HOUR_MS),), default=0))


def alert_history(db: "Database", now_ms: int, window_ms: int) -> tuple[list[Alert], dict[str, int]]:
    """The alerts active at the last snapshot within ``window_ms``, and when each rule last fired in it."""
    rows = db.query("SELECT alerts_json FROM metric_snapshots WHERE snapshot_at >= ?"
                    " ORDER BY snapshot_at DESC, id DESC", (to_iso(now_ms - window_ms),))
    last_fired: dict[str, int] = {}
    previous: list[Alert] = []
    for index, (raw,) in enumerate(rows):
        alerts = _alerts(raw)
        if index == 0:
            previous = alerts
        for alert in alerts:
            last_fired[alert.rule] = max(alert.fired_at, last_fired.get(alert.rule, alert.fired_at))
    return previous, last_fired


def store_snapshot(db: "Database", snapshot: MetricsSnapshot, evaluation: Evaluation, now_ms: int) -> str:
    row_id = new_ulid(now_ms)
    db.execute("INSERT INTO metric_snapshots (id, snapshot_at, metrics_json, alerts_json, created_at)"
               " VALUES (?, ?, ?, ?, ?)", (row_id, to_iso(now_ms), orjson.dumps(snapshot.to_json()).decode(),
                orjson.dumps([a.to_json() for a in evaluation.active]).decode(), to_iso(now_ms)))
    return row_id


def latest_alerts(db: "Database") -> tuple[str, list[dict[str, Any]]] | None:
    """The last snapshot's time and active alerts (for ``status``); None when no snapshot was stored.

    Works on a database opened read-only that predates the table."""
    if db.scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'metric_snapshots'") is None:
        return None
    row = db.query_one("SELECT snapshot_at, alerts_json FROM metric_snapshots"
                       " ORDER BY snapshot_at DESC, id DESC LIMIT 1")
    if row is None:
        return None
    return row[0], [a.to_json() for a in _alerts(row[1])]


def _alerts(raw: str | None) -> list[Alert]:
    try:
        data = orjson.loads(raw) if raw else []
    except orjson.JSONDecodeError:
        return []
    if not isinstance(data, list):
        return []
    return [alert for alert in (Alert.from_json(item) for item in data if isinstance(item, dict)) if alert]



"""Alert rules (the reference's defaults and cooldowns), and the report_metrics task with its metric_snapshots rows."""

from __future__ import annotations

import logging

import orjson
import pytest

from automaton_min.clock import HOUR_MS, to_iso
from automaton_min.heartbeat.task_api import TaskContext
from automaton_min.observe import metrics as m
from automaton_min.observe.alerts import AlertEngine, default_rules
from automaton_min.observe.metrics import Metrics
from automaton_min.heartbeat.report_task import latest_alerts, report_metrics
from automaton_min.store.kv import set_value
from automaton_min.store.turns import StoredTurn, insert_turn

MINUTE = 60_000


def snapshot_of(clock, **setup):
    metrics = Metrics(now=clock)
    for name, value in setup.get("gauges", {}).items():
        metrics.set_gauge(name, value)
    for name, value in setup.get("counters", {}).items():
        metrics.inc(name, value)
    return metrics.snapshot()


def fired(clock, **setup) -> set[str]:
    return {a.rule for a in AlertEngine().evaluate(snapshot_of(clock, **setup), now_ms=clock()).active}


def test_default_rules_match_the_reference_table():
    table = {(r.name, r.severity, r.cooldown_ms // MINUTE) for r in default_rules()}
    assert table == {("balance_below_reserve", "critical", 5), ("heartbeat_high_failure_rate", "warning", 15),
                     ("policy_high_deny_rate", "warning", 15), ("context_near_capacity", "warning", 10),
                     ("inference_budget_warning", "warning", 30), ("child_unhealthy_extended", "warning", 30),
                     ("zero_turns_last_hour", "critical", 60)}


@pytest.mark.parametrize("setup, expected", [
    ({}, set()),
    ({"gauges": {m.BALANCE_CENTS: 999}}, {"balance_below_reserve"}),
    ({"gauges": {m.BALANCE_CENTS: 1000}}, set()),
    ({"counters": {m.HEARTBEAT_FAILURES: 21, m.HEARTBEAT_SUCCESSES: 79}}, {"heartbeat_high_failure_rate"}),
    ({"counters": {m.HEARTBEAT_FAILURES: 20, m.HEARTBEAT_SUCCESSES: 80}}, set()),
    ({"counters": {m.POLICY_DECISIONS: 10, m.POLICY_DENIES: 6}}, {"policy_high_deny_rate"}),
    ({"counters": {m.POLICY_DECISIONS: 9, m.POLICY_DENIES: 9}}, set()),  # fewer than 10 decisions
    ({"counters": {m.POLICY_DECISIONS: 10, m.POLICY_DENIES: 5}}, set()),
    ({"gauges": {m.CONTEXT_TOKENS: 90_001}}, {"context_near_capacity"}),
    ({"gauges": {m.CONTEXT_TOKENS: 90_000}}, set()),
    ({"counters": {m.INFERENCE_COST: 401}}, {"inference_budget_warning"}),
    ({"counters": {m.INFERENCE_COST: 400}}, set()),
    ({"gauges": {"unhealthy_child_count": 1}}, {"child_unhealthy_extended"}),
    ({"gauges": {m.TURNS_LAST_HOUR: 0}}, {"zero_turns_last_hour"}),
    ({"gauges": {m.TURNS_LAST_HOUR: 3}}, set()),
    ({"gauges": {m.TURNS_LAST_HOUR: -1}, "counters": {m.TURNS: 4}}, set()),  # not measured: the counter decides
])
def test_rule_conditions(clock, setup, expected):
    assert fired(clock, **setup) == expected


def test_cooldown_holds_back_repeats_and_only_a_new_critical_alert_wakes(clock):
    engine = AlertEngine()
    low = snapshot_of(clock, gauges={m.BALANCE_CENTS: 500, m.CONTEXT_TOKENS: 95_000})
    first = engine.evaluate(low, now_ms=clock())
    assert {a.rule for a in first.fired} == {"balance_below_reserve", "context_near_capacity"}
    assert [a.rule for a in first.wake] == ["balance_below_reserve"]  # the warning never wakes

    clock.advance(4 * MINUTE)  # within both cooldowns: still active, not fired again
    second = engine.evaluate(low, now_ms=clock(), previous=first.active)
    assert {a.rule for a in second.active} == {"balance_below_reserve", "context_near_capacity"}
    assert second.fired == () and second.wake == ()
    assert {a.fired_at for a in second.active} == {clock() - 4 * MINUTE}

    clock.advance(2 * MINUTE)  # past the balance rule's 5 minutes: it fires again but was already active
    third = engine.evaluate(low, now_ms=clock(), previous=second.active)
    assert [a.rule for a in third.fired] == ["balance_below_reserve"] and third.wake == ()


def test_a_flapping_critical_condition_wakes_once_per_cooldown(clock):
    engine = AlertEngine()
    low, ok = (snapshot_of(clock, gauges={m.BALANCE_CENTS: c}) for c in (500, 5000))
    first = engine.evaluate(low, now_ms=clock())
    last_fired = {a.rule: a.fired_at for a in first.active}
    clock.advance(MINUTE)
    cleared = engine.evaluate(ok, now_ms=clock(), previous=first.active, last_fired=last_fired)
    assert cleared.active == ()
    clock.advance(MINUTE)
    back = engine.evaluate(low, now_ms=clock(), previous=cleared.active, last_fired=last_fired)
    assert [a.rule for a in back.new] == ["balance_below_reserve"] and back.wake == ()  # within its cooldown
    clock.advance(5 * MINUTE)
    again = engine.evaluate(low, now_ms=clock(), previous=(), last_fired=last_fired)
    assert [a.rule for a in again.wake] == ["balance_below_reserve"]


# -- report_metrics ----------------------------------------------------------------------------


def context(db, clock, metrics, *, conway=None):
    return TaskContext(db=db, config=None, home=None, now=clock, tier="normal", wallet_address="0x0", conway=conway,
                       metrics=metrics)


def rows(db):
    return [(at, orjson.loads(metrics_json), orjson.loads(alerts_json)) for at, metrics_json, alerts_json in
            db.query("SELECT snapshot_at, metrics_json, alerts_json FROM metric_snapshots ORDER BY snapshot_at")]


def test_report_stores_a_snapshot_and_wakes_only_for_a_new_critical_alert(db, clock, caplog):
    metrics = Metrics(now=clock)
    metrics.inc(m.TURNS, 3)
    metrics.set_gauge(m.CONTEXT_TOKENS, 95_000)
    set_value(db, "last_known_balance", orjson.dumps({"cents": 700, "at": to_iso(clock())}).decode(), clock())
    set_value(db, "last_known_usdc", orjson.dumps({"atomic": 1_500_000, "at": to_iso(clock())}).decode(), clock())

    with caplog.at_level(logging.WARNING, logger="automaton_min"):
        result = report_metrics(context(db, clock, metrics, conway=object()))
    assert result.wake is not None and "below the 1000-cent reserve" in result.wake
    assert [a["rule"] for a in result.wake_payload["alerts"]] == ["balance_below_reserve"]
    assert {r.getMessage() for r in caplog.records} == {"alert"}
    assert {r.rule for r in caplog.records} == {"balance_below_reserve", "context_near_capacity"}
    [(at, stored_metrics, stored_alerts)] = rows(db)
    assert at == to_iso(clock())
    values = {e["name"]: e["value"] for e in stored_metrics}
    assert values[m.BALANCE_CENTS] == 700 and values[m.USDC] == 1.5 and values[m.TURNS] == 3
    assert values[m.TURNS_LAST_HOUR] == -1  # the daemon is not an hour old yet
    assert {a["rule"]: a["severity"] for a in stored_alerts} == {"balance_below_reserve": "critical",
                                                                  "context_near_capacity": "warning"}
    assert latest_alerts(db) == (at, stored_alerts)

    clock.advance(10 * MINUTE)  # still low: recorded (and fired again after 5 minutes), but no second wake
    assert report_metrics(context(db, clock, metrics, conway=object())).wake is None
    assert len(rows(db)) == 2


def test_cooldowns_survive_a_restart(db, clock):
    low = orjson.dumps({"cents": 100, "at": to_iso(clock())}).decode()
    set_value(db, "last_known_balance", low, clock())
    assert report_metrics(context(db, clock, Metrics(now=clock), conway=object())).wake
    clock.advance(MINUTE)
    restarted = Metrics(now=clock)  # a new process: nothing in memory, the cooldown comes from metric_snapshots
    assert report_metrics(context(db, clock, restarted, conway=object())).wake is None


def test_balances_from_kv_only_when_credits_apply(db, clock):
    set_value(db, "last_known_balance", orjson.dumps({"cents": 100, "at": to_iso(clock())}).decode(), clock())
    result = report_metrics(context(db, clock, Metrics(now=clock), conway=None))
    assert result.wake is None
    assert m.BALANCE_CENTS not in {e["name"] for e in rows(db)[0][1]}


def test_zero_turns_wakes_an_agent_that_should_be_working_but_not_one_asleep_by_choice(db, clock):
    metrics = Metrics(now=clock)
    clock.advance(2 * HOUR_MS)
    set_value(db, "sleep_until", to_iso(clock() + MINUTE), clock())
    assert report_metrics(context(db, clock, metrics)).wake is None
    assert {e["name"]: e["value"] for e in rows(db)[-1][1]}[m.TURNS_LAST_HOUR] == -1

    clock.advance(2 * MINUTE)  # the sleep ended a minute ago and no turn followed in the last hour
    insert_turn(db, StoredTurn("old", to_iso(clock() - HOUR_MS - 1), "running", None, None, "x"))
    result = report_metrics(context(db, clock, metrics))
    assert result.wake is not None and "no turn in the last hour" in result.wake

    insert_turn(db, StoredTurn("new", to_iso(clock() - 5 * MINUTE), "running", None, None, "x"))
    clock.advance(2 * HOUR_MS)
    insert_turn(db, StoredTurn("newer", to_iso(clock() - MINUTE), "running", None, None, "x"))
    report_metrics(context(db, clock, metrics))
    assert {e["name"]: e["value"] for e in rows(db)[-1][1]}[m.TURNS_LAST_HOUR] == 1
    assert rows(db)[-1][2] == []


def test_zero_turns_is_not_measured_while_dead(db, clock):
    metrics = Metrics(now=clock)
    clock.advance(2 * HOUR_MS)
    set_value(db, "agent_state", "dead", clock())
    assert report_metrics(context(db, clock, metrics)).wake is None
    assert {e["name"]: e["value"] for e in rows(db)[-1][1]}[m.TURNS_LAST_HOUR] == -1


def test_without_metrics_nothing_is_stored(db, clock):
    assert report_metrics(context(db, clock, None)).wake is None
    assert rows(db) == [] and latest_alerts(db) is None


def test_damaged_alert_rows_are_ignored(db, clock):
    db.execute("INSERT INTO metric_snapshots (id, snapshot_at, alerts_json) VALUES ('x', ?, ?)",
               (to_iso(clock()), '[{"rule": "r"}, 5, {"rule": "ok", "severity": "warning", "message": "m", '
                                 '"firedAt": "2026-11-22T10:15:30.250Z", "value": 1}]'))
    assert latest_alerts(db) == (to_iso(clock()), [{"rule": "ok", "severity": "warning", "message": "m",
                                                    "firedAt": "2026-11-22T10:15:30.250Z", "value": 1.0}])
    db.execute("UPDATE metric_snapshots SET alerts_json = 'not json'")
    assert latest_alerts(db) == (to_iso(clock()), [])


# -- status ------------------------------------------------------------------------------------


def test_status_shows_the_last_snapshots_alerts(set_up, cli, clock):
    from automaton_min.store.db import open_database

    result = cli("status", "--json")
    assert result.code == 0, result.stderr
    assert (orjson.loads(result.stdout)["alerts"], orjson.loads(result.stdout)["alertsAt"]) == ([], None)

    with open_database(set_up.default_db_path, now=clock) as db:
        metrics = Metrics(now=clock)
        metrics.set_gauge(m.CONTEXT_TOKENS, 95_000)
        report_metrics(context(db, clock, metrics))
    info = orjson.loads(cli("status", "--json").stdout)
    assert info["alertsAt"] == to_iso(clock())
    assert [(a["rule"], a["severity"]) for a in info["alerts"]] == [("context_near_capacity", "warning")]
    text = cli("status").stdout
    assert f"warning context_near_capacity: the last prompt held 95000 tokens (over 90000) (as of {to_iso(clock())})" in text


def test_latest_alerts_on_a_database_without_the_table(db):
    db.execute("DROP TABLE metric_snapshots")
    assert latest_alerts(db) is None

"""The default heartbeat tasks, retention, the heartbeat.yml import and schedule changes, on a real state.db."""

from __future__ import annotations

import threading

import orjson
import pytest

from automaton_min.agent.states import read_agent_state, set_agent_state
from automaton_min.agent.tools.services import ToolServices
from automaton_min.clock import to_iso
from automaton_min.config import config_from
from automaton_min.conway.client import ConwayClient
from automaton_min.errors import UserError
from automaton_min.heartbeat import schedule as sched
from automaton_min.heartbeat import tasks
from automaton_min.heartbeat.control import HeartbeatControl, ensure_schedule
from automaton_min.heartbeat.retention import BATCH, prune_all
from automaton_min.heartbeat.task_api import TaskContext
from automaton_min.heartbeat.yml_import import IMPORTED_KEY
from automaton_min.ids import new_ulid
from automaton_min.store.kv import get_value
from standins.conway_api import ConwayApi

HOUR = 3_600_000
DAY = 24 * HOUR


def ctx_for(db, home, clock, tier="normal", conway=None, **kw) -> TaskContext:
    config = config_from({"name": "ada", "conwayApiKey": "k" if conway else None})
    return TaskContext(db=db, config=config, home=home, now=clock, tier=tier, wallet_address="0x" + "a" * 40,
                       conway=conway, stop=threading.Event(), **kw)


def sleeping(db, clock):
    set_agent_state(db, "waking", clock(), reason="test")
    set_agent_state(db, "sleeping", clock(), reason="test")


def test_check_credits_kills_after_an_hour_at_zero_and_wakes_once(db, home, clock):
    sleeping(db, clock)
    with ConwayApi(balance_cents=0) as api:
        conway = ConwayClient(api.url, api.api_key, db=db, now=clock)
        first = tasks.check_credits(ctx_for(db, home, clock, conway=conway))
        assert first.wake is None and get_value(db, tasks.ZERO_SINCE_KEY) == to_iso(clock())
        clock.advance(HOUR - 1)
        assert tasks.check_credits(ctx_for(db, home, clock, conway=conway)).wake is None
        assert read_agent_state(db) == "sleeping"
        clock.advance(1)
        result = tasks.check_credits(ctx_for(db, home, clock, conway=conway))
        assert result.wake == "Dead: zero credits for 60 minutes. Need funding."
        assert read_agent_state(db) == "dead"
        assert tasks.check_credits(ctx_for(db, home, clock, conway=conway)).wake is None  # already dead
        api.balance_cents = 30
        tasks.check_credits(ctx_for(db, home, clock, conway=conway))
        assert get_value(db, tasks.ZERO_SINCE_KEY) is None
        check = orjson.loads(get_value(db, "last_credit_check"))
        assert check["credits"] == 30 and check["tier"] == "low_compute"


def test_check_credits_wakes_on_a_drop_to_critical(db, home, clock):
    sleeping(db, clock)
    with ConwayApi(balance_cents=800) as api:
        conway = ConwayClient(api.url, api.api_key, db=db, now=clock)
        assert tasks.check_credits(ctx_for(db, home, clock, conway=conway)).wake is None
        api.balance_cents = 7
        assert tasks.check_credits(ctx_for(db, home, clock, conway=conway)).wake == "Credits dropped to critical tier: $0.07"


def test_heartbeat_ping_writes_distress_and_wakes_at_most_hourly(db, home, clock):
    assert tasks.heartbeat_ping(ctx_for(db, home, clock)).wake is None
    assert orjson.loads(get_value(db, "last_heartbeat_ping"))["tier"] == "normal"
    assert get_value(db, "last_distress") is None
    first = tasks.heartbeat_ping(ctx_for(db, home, clock, tier="critical"))
    assert first.wake.startswith("Distress: critical.")
    assert orjson.loads(get_value(db, "last_distress"))["level"] == "critical"
    clock.advance(15 * 60_000)
    assert tasks.heartbeat_ping(ctx_for(db, home, clock, tier="critical")).wake is None
    clock.advance(HOUR)
    assert tasks.heartbeat_ping(ctx_for(db, home, clock, tier="critical")).wake is not None


def test_check_usdc_balance_tops_up_when_critical_with_usdc(db, home, clock):
    calls = []

    class Result:
        usd = 5

    def topup(cents, usdc):
        calls.append((cents, usdc))
        return Result()

    with ConwayApi(balance_cents=3) as api:
        conway = ConwayClient(api.url, api.api_key, db=db, now=clock)
        conway.credits_balance()  # the last known balance the task reads
        healthy = tasks.check_usdc_balance(ctx_for(db, home, clock, conway=conway, usdc_balance=lambda: 9_000_000,
                                                   topup=topup))
        assert healthy.wake is None and calls == [] and healthy.reached == ("rpc",)  # the node answered
        result = tasks.check_usdc_balance(ctx_for(db, home, clock, tier="critical", conway=conway,
                                                  usdc_balance=lambda: 9_000_000, topup=topup))
        assert calls == [(3, 9_000_000)]
        assert result.wake.startswith("Auto-topped up $5 in credits (was $0.03)")
        again = tasks.check_usdc_balance(ctx_for(db, home, clock, tier="critical", conway=conway,
                                                 usdc_balance=lambda: 9_000_000, topup=topup))
        assert calls == [(3, 9_000_000)] and again.wake is None and again.reached == ("rpc",)  # the cool-down
        poor = tasks.check_usdc_balance(ctx_for(db, home, clock, tier="critical", conway=conway,
                                                usdc_balance=lambda: 4_000_000, topup=topup))
        assert poor.wake is None and len(calls) == 1
    assert orjson.loads(get_value(db, "last_usdc_check"))["balance"] == 4_000_000


def test_health_check_locally_checks_the_disk(db, home, clock):
    result = tasks.health_check(ctx_for(db, home, clock))
    assert result.summary == "healthy" and get_value(db, "health_check_status") == "ok"


def test_refresh_models_uses_the_registry_refresh(db, home, clock):
    with ConwayApi() as api:
        conway = ConwayClient(api.url, api.api_key, db=db, now=clock)
        result = tasks.refresh_models(ctx_for(db, home, clock, conway=conway))
    assert "models refreshed" in result.summary
    assert db.scalar("SELECT COUNT(*) FROM model_registry WHERE model_id = 'claude-x'") == 1


# --------------------------------------------------------------------------- retention


def test_retention_prunes_old_rows_in_batches_and_keeps_open_work(db, home, clock):
    ensure_schedule(db, home, config_from({}), clock())
    old, new = to_iso(clock() - 10 * DAY), to_iso(clock())
    with db.transaction():
        for i in range(BATCH * 2 + 7):
            db.execute("INSERT INTO heartbeat_history (id, task_name, started_at, result) VALUES (?, 'retention', ?, 'success')",
                       (new_ulid(clock() - 10 * DAY) + str(i), old))
        db.execute("INSERT INTO heartbeat_history (id, task_name, started_at, result) VALUES ('keep', 'retention', ?, 'success')", (new,))
        db.execute("INSERT INTO wake_events (source, reason, consumed_at, created_at) VALUES ('x', 'old', ?, ?)", (old, old))
        db.execute("INSERT INTO wake_events (source, reason, created_at) VALUES ('x', 'pending', ?)", (old,))
        db.execute("INSERT INTO heartbeat_dedup (dedup_key, task_name, expires_at) VALUES ('gone', 't', ?)", (old,))
        db.execute("INSERT INTO heartbeat_dedup (dedup_key, task_name, expires_at) VALUES ('live', 't', ?)",
                   (to_iso(clock() + HOUR),))
        db.execute("INSERT INTO metric_snapshots (id, snapshot_at) VALUES ('m-old', ?)", (old,))
        for n in range(150):
            db.execute("INSERT INTO turns (id, timestamp, state, thinking) VALUES (?, ?, 'running', '')",
                       (f"t{n:04d}", to_iso(clock() - n * 1000)))
    removed = prune_all(db, config_from({"retention": {"turnsKeep": 100}}), clock())
    assert removed["heartbeat_history"] == BATCH * 2 + 7
    assert db.scalar("SELECT id FROM heartbeat_history") == "keep"
    assert [r[0] for r in db.query("SELECT reason FROM wake_events")] == ["pending"]
    assert [r[0] for r in db.query("SELECT dedup_key FROM heartbeat_dedup")] == ["live"]
    assert db.scalar("SELECT COUNT(*) FROM metric_snapshots") == 0
    assert db.scalar("SELECT COUNT(*) FROM turns") == 100
    assert db.scalar("SELECT MAX(id) FROM turns") == "t0099"  # the newest kept
    assert prune_all(db, config_from({"retention": {"turnsKeep": 100}}), clock()) == {}


# --------------------------------------------------------------------------- heartbeat.yml


YML = """# written by the reference runtime
entries:
  - name: heartbeat_ping
    schedule: "*/10 * * * *"
    task: heartbeat_ping
    enabled: true
  - name: check_for_updates
    schedule: "0 */6 * * *"
    task: check_for_updates
    enabled: true
  - name: colony_health_check
    schedule: "*/5 * * * *"
    task: colony_health_check
    enabled: true
  - name: health_check
    schedule: "61 * * * *"
    task: health_check
  - name: refresh_models
    schedule: '0 3 * * *'
    task: refresh_models
    enabled: false
    params:
      note: nested values are ignored
  - name: broken
    schedule: [1, 2]
defaultIntervalMs: 60000
"""


def test_heartbeat_yml_is_imported_once_and_bad_entries_are_skipped(db, home, clock):
    home.root.joinpath("heartbeat.yml").write_text(YML)
    config = config_from({})
    ensure_schedule(db, home, config, clock())
    assert sched.read_row(db, "heartbeat_ping").cron_expression == "*/10 * * * *"
    row = sched.read_row(db, "refresh_models")
    assert row.cron_expression == "0 3 * * *" and not row.enabled
    assert sched.read_row(db, "health_check").cron_expression == "*/30 * * * *"  # invalid minute: default kept
    assert sched.read_row(db, "check_for_updates").cron_expression == "0 */6 * * *"
    assert sched.read_row(db, "colony_health_check") is None  # not a task here
    assert get_value(db, IMPORTED_KEY) is not None
    sched.set_cron(db, "heartbeat_ping", "*/20 * * * *", clock())
    ensure_schedule(db, home, config, clock())  # a restart: the file is not read again
    assert sched.read_row(db, "heartbeat_ping").cron_expression == "*/20 * * * *"


# --------------------------------------------------------------------------- changes: the tool and the control


def test_modify_heartbeat_tool_changes_the_schedule_and_pokes(db, home, clock):
    from automaton_min.agent.tools.base import ToolContext, ToolFailure
    from automaton_min.agent.tools.self_tools import run_modify_heartbeat

    ensure_schedule(db, home, config_from({}), clock())
    pokes = []
    control = HeartbeatControl(db, poke=lambda: pokes.append(1), now=clock)
    ctx = ToolContext(db, config_from({}), clock, services=ToolServices(heartbeat=control))
    text = run_modify_heartbeat(ctx, {"action": "update", "name": "health_check", "schedule": "0 * * * *"})
    assert "updated health_check" in text and pokes == [1]
    assert sched.read_row(db, "health_check").cron_expression == "0 * * * *"
    run_modify_heartbeat(ctx, {"action": "remove", "name": "retention"})
    assert not sched.read_row(db, "retention").enabled
    with pytest.raises(ToolFailure, match="hour field"):
        run_modify_heartbeat(ctx, {"action": "update", "name": "health_check", "schedule": "0 25 * * *"})
    with pytest.raises(ToolFailure, match="5 fields"):  # cron.py is the one check: the schema takes any text
        run_modify_heartbeat(ctx, {"action": "update", "name": "health_check", "schedule": "every hour"})
    with pytest.raises(ToolFailure, match="unknown task"):
        run_modify_heartbeat(ctx, {"action": "add", "name": "mine_bitcoin", "schedule": "* * * * *"})
    db.execute("DELETE FROM heartbeat_schedule WHERE task_name = 'refresh_models'")
    run_modify_heartbeat(ctx, {"action": "add", "name": "refresh_models", "schedule": "0 5 * * *"})
    row = sched.read_row(db, "refresh_models")
    assert row.cron_expression == "0 5 * * *" and row.tier_minimum == "low_compute"
    assert len(pokes) == 3
    for change in ({"action": "update", "name": "check_for_updates", "schedule": "0 0 29 2 1"},
                   {"action": "remove", "name": "check_for_updates"}):  # the owner's updates setting governs it
        with pytest.raises(ToolFailure, match="owner's settings"):
            run_modify_heartbeat(ctx, change)
    row = sched.read_row(db, "check_for_updates")
    assert (row.cron_expression, row.enabled, len(pokes)) == ("0 */4 * * *", True, 3)


def test_control_refuses_unknown_and_disabled_tasks(db, home, clock):
    ensure_schedule(db, home, config_from({}), clock())
    control = HeartbeatControl(db, now=clock)
    with pytest.raises(UserError, match="no heartbeat task named 'nope'"):
        control.set_enabled("nope", True)
    control.set_enabled("health_check", False)
    with pytest.raises(UserError, match="disabled"):
        control.request_run("health_check")


def test_heartbeat_config_keys_are_validated():
    from automaton_min.config import validate
    from automaton_min.errors import ConfigError

    validate({"heartbeatTimezone": "Europe/Berlin", "retention": {"turnsKeep": 500}})
    with pytest.raises(ConfigError, match="heartbeatTimezone"):
        validate({"heartbeatTimezone": "Mars/Olympus"})
    with pytest.raises(ConfigError, match="retention.turnsKeep"):
        validate({"retention": {"turnsKeep": 5}})
    with pytest.raises(ConfigError, match="retention: expected an object"):
        validate({"retention": 7})


def test_check_usdc_balance_reads_the_chain_hourly_at_a_healthy_tier(db, home, clock):
    reads = []

    def reader():
        reads.append(clock())
        return 7_000_000

    tasks.check_usdc_balance(ctx_for(db, home, clock, usdc_balance=reader))
    clock.advance(5 * 60_000)
    assert "within the hour" in tasks.check_usdc_balance(ctx_for(db, home, clock, usdc_balance=reader)).summary
    tasks.check_usdc_balance(ctx_for(db, home, clock, tier="low_compute", usdc_balance=reader))
    clock.advance(HOUR)
    tasks.check_usdc_balance(ctx_for(db, home, clock, usdc_balance=reader))
    assert len(reads) == 3


def test_retention_also_keeps_the_memory_stores_within_their_bounds(db, clock):
    """Memory tables grow too: the retention run drops expired working memory and trims every store to its bound."""
    from automaton_min.memory.stores import WorkingMemory

    working = WorkingMemory(db, clock)
    working.add("s1", "a note that lasts a minute", ttl_ms=60_000)
    kept = working.add("s1", "a note that stays")
    clock.advance(120_000)
    removed = prune_all(db, config_from({}), clock())
    assert removed.get("working_memory") == 1
    assert [row[0] for row in db.query("SELECT content FROM working_memory")] == [kept.content]


def test_retention_drops_failed_turns_after_a_week(db, clock):
    from automaton_min.clock import to_iso
    from automaton_min.store.turns import insert_failed_turn

    for name, age_days in (("old", 8), ("recent", 6)):
        insert_failed_turn(db, name, name, to_iso(clock() - age_days * 86_400_000), "running", "wakeup",
                           {"ended": "failed", "error": "boom"})
    assert prune_all(db, config_from({}), clock()).get("failed_turns") == 1
    assert [row[0] for row in db.query("SELECT id FROM failed_turns")] == ["recent"]


def test_an_rpc_node_that_does_not_answer_is_unreachable_not_a_failure(db, home, clock):
    from automaton_min.chain.usdc import BASE, usdc_balance
    from automaton_min.heartbeat.task_api import ServiceUnreachable

    def reader():  # the real reader against a closed port, as with the public node offline
        return usdc_balance("http://127.0.0.1:9", "0x" + "a" * 40, BASE)

    with pytest.raises(ServiceUnreachable) as caught:
        tasks.check_usdc_balance(ctx_for(db, home, clock, usdc_balance=reader))
    assert "the RPC node (rpcUrl) did not answer" in str(caught.value)


def test_a_conway_api_that_does_not_answer_is_unreachable_and_an_error_answer_is_a_failure(db, home, clock):
    from automaton_min.conway.client import ConwayError
    from automaton_min.heartbeat.task_api import ServiceUnreachable
    from automaton_min.net.http import request

    closed = ConwayClient("http://127.0.0.1:9", "k-closed", db=db, now=clock, send=request)  # one attempt
    with pytest.raises(ServiceUnreachable) as caught:
        tasks.check_credits(ctx_for(db, home, clock, conway=closed))
    assert caught.value.part == "conway"
    with ConwayApi(balance_cents=500) as api:
        api.fail("/v1/credits/balance", 503)
        answering = ConwayClient(api.url, api.api_key, db=db, now=clock, send=request)
        with pytest.raises(ConwayError) as failed:
            tasks.check_credits(ctx_for(db, home, clock, conway=answering))
    assert not isinstance(failed.value, ServiceUnreachable) and failed.value.status == 503


def test_soul_reflection_wakes_only_when_something_changed_and_the_soul_drifted(db, home, clock):
    from automaton_min.store.turns import StoredTurn, insert_turn

    home.ensure()
    config = config_from({"name": "ada", "genesisPrompt": "Write haiku about the sea."})
    ctx = TaskContext(db=db, config=config, home=home, now=clock, tier="normal", wallet_address="0x" + "a" * 40)
    home.soul_path.write_text("# ada\nI write haiku about the sea.")
    agreed = tasks.soul_reflection(ctx)
    assert agreed.wake is None and "agree" in agreed.summary
    assert "as they were" in tasks.soul_reflection(ctx).summary  # nothing changed: no measure, no wake
    home.soul_path.write_text("# ada\nI trade tokens.")
    drifted = tasks.soul_reflection(ctx)
    assert drifted.wake.startswith("Soul reflection: your SOUL.md agrees with your purpose at 0.00")
    assert tasks.soul_reflection(ctx).wake is None  # the same soul and record: it does not wake again
    insert_turn(db, StoredTurn("t1", to_iso(clock()), "running", None, None, "thinking", (), None, 0))
    assert tasks.soul_reflection(ctx).wake is not None  # a new turn is new record: reflected on again
    assert orjson.loads(get_value(db, "last_soul_reflection"))["turns"] == 1

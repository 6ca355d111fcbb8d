"""The durable scheduler on a real state.db with an injected clock: due rules, leases, retries, skipped windows,
tier minimums, timeouts, restarts; and the real thread woken by events."""

from __future__ import annotations

import threading

import pytest

from automaton_min.clock import from_iso, to_iso
from automaton_min.config import config_from
from automaton_min.heartbeat import schedule as sched
from automaton_min.heartbeat.scheduler import Scheduler
from automaton_min.heartbeat.task_api import ServiceUnreachable, TaskContext, TaskResult
from automaton_min.store.wake import WakeBus, consume_all
from automaton_min.store.db import open_database

T0 = from_iso("2026-11-22T10:00:30.000Z")


class Calls:
    def __init__(self) -> None:
        self.names: list[str] = []
        self.fail: set[str] = set()
        self.unreachable: set[str] = set()

    def task(self, name: str, wake: str | None = None):
        def run(ctx: TaskContext) -> TaskResult:
            self.names.append(name)
            if name in self.fail:
                raise RuntimeError(f"{name} broke")
            if name in self.unreachable:
                raise ServiceUnreachable("rpc", "POST http://127.0.0.1:9 failed: ConnectionError")
            return TaskResult("ok", wake=wake, reached=("rpc",) if name == "every15" else ())
        return run


@pytest.fixture
def setup(home, clock, db):
    clock.ms = T0
    calls = Calls()
    tier = {"value": "normal"}
    defaults = (sched.TaskDefault("every15", "*/15 * * * *"), sched.TaskDefault("hourly", "0 * * * *", "normal"),
                sched.TaskDefault("waker", "*/20 * * * *", "dead", priority=5))
    tasks = {"every15": calls.task("every15"), "hourly": calls.task("hourly"), "waker": calls.task("waker", "work!")}
    signal = threading.Event()

    def make(**kw):
        def context(worker_db, stop):
            return TaskContext(db=worker_db, config=config_from({}), home=home, now=clock, tier=tier["value"],
                               wallet_address="0x" + "1" * 40, stop=stop)
        s = Scheduler(home, config_from({}), home.default_db_path, kw.pop("tasks", tasks), context, WakeBus(signal),
                      now=clock, defaults=kw.pop("defaults", defaults), tier_of=lambda _db: tier["value"], **kw)
        s.prepare(db)
        return s

    return make, calls, tier, signal


def names(ran):
    return sorted((r.name, r.result) for r in ran)


def test_never_run_rows_run_once_then_follow_the_cron(setup, clock, db):
    make, calls, _, _ = setup
    s = make()
    assert names(s.run_due(db, clock())) == [("every15", "success"), ("hourly", "success"), ("waker", "success")]
    assert s.run_due(db, clock()) == []
    clock.ms = from_iso("2026-11-22T10:14:59.000Z")
    assert s.run_due(db, clock()) == []
    assert s.seconds_until_due(db, clock()) == 1.0  # sleeps until 10:15, no tick
    clock.ms = from_iso("2026-11-22T10:15:00.000Z")
    assert names(s.run_due(db, clock())) == [("every15", "success")]
    row = sched.read_row(db, "every15")
    assert row.run_count == 2 and row.last_result == "success" and row.lease_owner is None
    # a success after a success changes the schedule row only; a wake is always in the history
    assert db.scalar("SELECT COUNT(*) FROM heartbeat_history WHERE task_name = 'every15'") == 1
    clock.ms = from_iso("2026-11-22T10:20:00.000Z")
    s.run_due(db, clock())
    assert db.scalar("SELECT COUNT(*) FROM heartbeat_history WHERE task_name = 'waker'") == 2


def test_missed_windows_after_a_suspend_run_once(setup, clock, db):
    make, calls, _, _ = setup
    s = make()
    s.run_due(db, clock())
    clock.ms = from_iso("2026-11-22T13:07:00.000Z")  # three hours asleep: 11 windows of every15 missed
    s.run_due(db, clock())
    assert calls.names.count("every15") == 2
    assert s.run_due(db, clock()) == []
    assert s.seconds_until_due(db, clock()) == 480.0  # the next future window: 13:15


def test_tier_minimum_holds_a_task_back(setup, clock, db):
    make, calls, tier, _ = setup
    tier["value"] = "critical"
    s = make()
    assert names(s.run_due(db, clock())) == [("every15", "success"), ("waker", "success")]
    tier["value"] = "normal"
    assert names(s.run_due(db, clock())) == [("hourly", "success")]


def test_a_failure_is_retried_once_30s_later_then_back_to_the_cron(setup, clock, db):
    from automaton_min.observe.metrics import HEARTBEAT_FAILURES, Metrics

    make, calls, _, _ = setup
    calls.fail.add("every15")
    metrics = Metrics()
    s = make(metrics=metrics)
    ran = {r.name: r for r in s.run_due(db, clock())}
    assert ran["every15"].result == "failure" and ran["every15"].retry_at == clock() + 30_000
    clock.advance(29_000)
    assert s.run_due(db, clock()) == []
    clock.advance(1_000)
    ran = s.run_due(db, clock())
    assert [(r.name, r.result, r.retry_at) for r in ran] == [("every15", "failure", None)]  # the retry, which failed
    row = sched.read_row(db, "every15")
    assert row.fail_count == 2 and row.next_run_at is None and "broke" in row.last_error
    assert metrics.snapshot().counter(HEARTBEAT_FAILURES) == 2
    clock.ms = from_iso("2026-11-22T10:15:00.000Z")
    calls.fail.clear()
    assert ("every15", "success") in names(s.run_due(db, clock()))


def test_a_part_that_does_not_answer_is_said_once_backed_off_and_is_not_a_failure(setup, clock, db, caplog):
    from automaton_min.observe.metrics import HEARTBEAT_FAILURES, Metrics
    from automaton_min.heartbeat.parts import PartStates

    make, calls, _, _ = setup
    calls.unreachable.add("every15")
    metrics = Metrics()
    s = make(metrics=metrics, parts=PartStates({"rpc": "http://127.0.0.1:9"}))
    tried_at = []
    with caplog.at_level("INFO", logger="automaton_min"):
        for _ in range(4 * 60):  # four hours, a pass a minute
            if "every15" in [r.name for r in s.run_due(db, clock())]:
                tried_at.append((clock() - T0) // 60_000)
            clock.advance(60_000)
        calls.unreachable.clear()
        clock.advance(30 * 60_000)
        s.run_due(db, clock())
        clock.advance(30 * 60_000)
        s.run_due(db, clock())
    said = [r.getMessage() for r in caplog.records if getattr(r, "part", None) == "rpc"]
    assert said == ["the RPC node (rpcUrl) does not answer; tried again with a growing back-off, said again when it "
                    "answers", "the RPC node (rpcUrl) answers again"], said
    assert tried_at[:7] == [0, 1, 3, 7, 15, 31, 61] and tried_at[7:] == [91 + 30 * n for n in range(len(tried_at) - 7)]
    assert not metrics.snapshot().counter(HEARTBEAT_FAILURES)
    assert not [r for r in caplog.records if "failed" in r.getMessage()]
    row = sched.read_row(db, "every15")
    assert row.last_result == "success" and row.next_run_at is None  # answered: back to its cron
    assert db.scalar("SELECT value FROM kv WHERE key = 'parts'").count('"on"') == 1


def test_a_task_whose_part_is_off_is_skipped_without_a_warning(setup, clock, db, caplog):
    from automaton_min.heartbeat.parts import PartStates

    make, calls, _, _ = setup
    defaults = (sched.TaskDefault("check_credits", "*/30 * * * *"), sched.TaskDefault("gone", "*/30 * * * *"))
    s = make(tasks={}, defaults=defaults, parts=PartStates({"conway": None}))
    with caplog.at_level("INFO", logger="automaton_min"):
        assert names(s.run_due(db, clock())) == [("check_credits", "skipped"), ("gone", "skipped")]
    assert [r.task for r in caplog.records if r.levelname == "WARNING"] == ["gone"]
    assert sched.read_row(db, "check_credits").last_error == "the Conway API is off (no conwayApiKey)"


def test_a_lease_held_by_another_owner_blocks_until_it_expires(setup, clock, db):
    make, calls, _, _ = setup
    s = make()
    assert sched.acquire_lease(db, "every15", "someone-else", clock())
    ran = names(s.run_due(db, clock()))
    assert ("every15", "success") not in ran
    assert s.seconds_until_due(db, clock()) == 60.0
    clock.advance(60_000)  # the other owner died: its lease expires after 60 s
    assert names(s.run_due(db, clock())) == [("every15", "success")]


def test_history_and_next_runs_survive_a_restart(setup, clock, db, home):
    make, calls, _, _ = setup
    calls.fail.add("every15")
    make().run_due(db, clock())
    sched.set_enabled(db, "hourly", False, clock())
    sched.set_cron(db, "waker", "0 0 * * *", clock())
    restarted = make()  # prepare() again: nothing is reset
    assert restarted.run_due(db, clock()) == []
    row = sched.read_row(db, "every15")
    assert row.next_run_at == clock() + 30_000 and row.fail_count == 1
    assert not sched.read_row(db, "hourly").enabled
    assert sched.read_row(db, "waker").cron_expression == "0 0 * * *"
    assert db.scalar("SELECT COUNT(*) FROM heartbeat_history") == 3


def test_a_wake_is_stored_once_and_sets_the_signal(setup, clock, db):
    make, calls, _, signal = setup
    make().run_due(db, clock())
    events = consume_all(db, now_ms=clock())
    assert [(e.source, e.reason, e.payload["task"]) for e in events] == [("heartbeat", "work!", "waker")]
    assert signal.is_set()


def test_a_missing_task_function_is_skipped_and_recorded_once(setup, clock, db):
    make, calls, _, _ = setup
    s = make(tasks={"every15": calls.task("every15")})
    assert names(s.run_due(db, clock())) == [("every15", "success"), ("hourly", "skipped"), ("waker", "skipped")]
    clock.ms = from_iso("2026-11-22T11:00:00.000Z")
    assert names(s.run_due(db, clock())) == [("every15", "success")]
    assert db.scalar("SELECT COUNT(*) FROM heartbeat_history WHERE result = 'skipped'") == 2
    extra = {"waker": calls.task("waker")}
    later = make(tasks={"every15": calls.task("every15")}, extra_tasks=extra)
    assert ("waker", "success") in names(later.run_due(db, clock()))


def test_next_run_at_makes_a_task_due(setup, clock, db):
    make, calls, _, _ = setup
    s = make()
    s.run_due(db, clock())
    assert sched.request_run(db, "every15", clock())  # what `automaton-min heartbeat run` writes
    assert names(s.run_due(db, clock())) == [("every15", "success")]
    assert s.run_due(db, clock()) == []


def test_a_task_that_overruns_is_recorded_timeout_and_keeps_its_lease_until_it_ends(setup, clock, db, home):
    make, calls, _, _ = setup
    release = threading.Event()
    seen_stop = threading.Event()

    def slow(ctx: TaskContext) -> TaskResult:
        ctx.stop.wait()  # the scheduler sets it at the timeout
        seen_stop.set()
        release.wait(10)
        return TaskResult("late")

    s = make(tasks={"every15": slow})
    db.execute("UPDATE heartbeat_schedule SET timeout_ms = 50 WHERE task_name = 'every15'")
    ran = {r.name: r for r in s.run_due(db, clock())}
    assert ran["every15"].result == "timeout" and ran["every15"].retry_at == clock() + 30_000
    assert seen_stop.wait(5)
    row = sched.read_row(db, "every15")
    assert row.last_result == "timeout" and row.lease_owner == s.owner
    clock.advance(30_000)
    assert s.run_due(db, clock()) == []  # still running: not started twice
    run = s._running["every15"]
    release.set()
    assert run.done.wait(5)
    assert sched.read_row(db, "every15").lease_owner is None
    assert [r.name for r in s.run_due(db, clock())] == ["every15"]


def test_the_thread_sleeps_until_poked_and_stops_promptly(setup, clock, home, db):
    make, calls, _, _ = setup
    started = threading.Event()
    ran_hourly = threading.Event()

    def every15(ctx):
        started.set()
        return TaskResult()

    def hourly(ctx):
        ran_hourly.set()
        return TaskResult()

    s = make(tasks={"every15": every15, "hourly": hourly, "waker": calls.task("waker")})
    db.execute("UPDATE heartbeat_schedule SET last_run_at = ?", (to_iso(clock()),))  # nothing due at start
    db.execute("UPDATE heartbeat_schedule SET next_run_at = ? WHERE task_name = 'every15'", (to_iso(clock()),))
    s.start()
    assert started.wait(10)
    assert sched.request_run(db, "hourly", clock())
    s.poke()
    assert ran_hourly.wait(10)
    assert s.stop(10)
    assert s.alive_at() > 0


def test_an_interval_from_config_replaces_the_cron(setup, clock, db):
    """socialPollIntervalSeconds: a task given an interval runs that long after its last run, whatever its cron."""
    make, _, _, _ = setup
    s = make(intervals={"hourly": 45_000})
    row = sched.read_row(db, "hourly")
    assert row.interval_ms == 45_000 and s._due_at(row, clock()) == clock()  # never run: due now
    db.execute("UPDATE heartbeat_schedule SET last_run_at = ? WHERE task_name = ?", (to_iso(clock()), "hourly"))
    assert s._due_at(sched.read_row(db, "hourly"), clock()) == clock() + 45_000

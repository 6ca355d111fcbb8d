"""A command that takes every free task of the service's pids cgroup must not break later turns: once warm,
inference calls, heartbeat runs and a stop start no thread (``Thread.start`` is made to fail as it does then:
``RuntimeError: can't start new thread``). No sleeps: every wait is on an event."""

from __future__ import annotations

import threading

import pytest

from automaton_min.config import config_from
from automaton_min.heartbeat import schedule as sched
from automaton_min.heartbeat.scheduler import Scheduler
from automaton_min.heartbeat.task_api import TaskContext, TaskResult
from automaton_min.inference import deadline
from automaton_min.inference.deadline import InferenceCancelled, call_with_deadline
from automaton_min.runtime.daemon import Signals
from automaton_min.workers import Workers

CALLS = 20


@pytest.fixture
def inference_workers(monkeypatch: pytest.MonkeyPatch) -> Workers:
    """A fresh pool for ``call_with_deadline``, so no earlier test's idle workers count."""
    workers = Workers("inference-call")
    monkeypatch.setattr(deadline, "_WORKERS", workers)
    return workers


def test_inference_calls_go_on_when_no_thread_can_be_started(inference_workers, refuse_new_threads) -> None:
    assert call_with_deadline(lambda: "warm", 5) == "warm"
    refused = refuse_new_threads()
    for n in range(CALLS):
        assert call_with_deadline(lambda n=n: n, 5) == n
    with pytest.raises(KeyError):
        call_with_deadline(lambda: {}["missing"], 5)
    gate, stop = threading.Event(), threading.Event()
    stop.set()
    with pytest.raises(InferenceCancelled):  # still on the reused worker: a stop cuts the wait short
        call_with_deadline(lambda: gate.wait(5), 600, cancel=stop)
    gate.set()
    assert refused == []


def test_a_call_still_answers_when_its_worker_is_stuck_and_no_thread_can_be_started(
        inference_workers, refuse_new_threads) -> None:
    gate, stop = threading.Event(), threading.Event()
    stop.set()
    with pytest.raises(InferenceCancelled):
        call_with_deadline(lambda: gate.wait(5), 600, cancel=stop)  # abandoned: its worker stays busy
    refused = refuse_new_threads()
    assert call_with_deadline(lambda: "inline", 5) == "inline"  # runs in the caller, beyond the deadline
    assert refused == ["inference-call-2"]
    gate.set()


def test_an_abandoned_call_does_not_hold_up_the_next_one(inference_workers) -> None:
    gate, arrived, stop = threading.Event(), threading.Event(), threading.Event()
    stop.set()
    with pytest.raises(InferenceCancelled):
        call_with_deadline(lambda: (arrived.set(), gate.wait(5)), 600, cancel=stop)
    assert arrived.wait(5)
    assert call_with_deadline(lambda: "next", 5) == "next" and not gate.is_set()
    gate.set()


@pytest.fixture
def scheduler(home, clock, db):
    """A scheduler with two tasks: ``quick`` (notes its thread) and ``slow`` (returns when told to stop)."""
    ran_on: list[int] = []

    def quick(ctx: TaskContext) -> TaskResult:
        ran_on.append(threading.get_ident())
        return TaskResult("ok")

    def slow(ctx: TaskContext) -> TaskResult:
        ctx.stop.wait(5)
        return TaskResult("stopped")

    def context(worker_db, stop):
        return TaskContext(db=worker_db, config=config_from({}), home=home, now=clock, tier="normal",
                           wallet_address="0x" + "1" * 40, stop=stop)

    defaults = (sched.TaskDefault("quick", "*/15 * * * *"), sched.TaskDefault("slow", "*/15 * * * *", timeout_ms=50))
    s = Scheduler(home, config_from({}), home.default_db_path, {"quick": quick, "slow": slow}, context, None,
                  now=clock, defaults=defaults, tier_of=lambda _db: "normal")
    s.prepare(db)
    return s, ran_on


def test_heartbeat_runs_go_on_when_no_thread_can_be_started(scheduler, db, refuse_new_threads) -> None:
    s, ran_on = scheduler
    assert s.run_task(db, "quick").result == "success"
    refused = refuse_new_threads()
    for _ in range(CALLS):
        assert s.run_task(db, "quick").result == "success"
    assert len(set(ran_on)) == 1 and ran_on[0] != threading.get_ident()
    ran = s.run_task(db, "slow")  # on the reused worker, so its timeout still cuts it short
    assert ran.result == "timeout" and ran.error == "timed out after 50 ms"
    assert s._running["slow"].done.wait(5)
    assert sched.read_row(db, "slow").lease_owner is None  # released by the run once it really ended
    assert s.run_task(db, "quick").result == "success"
    assert refused == []


def test_a_stop_still_cuts_the_turn_off_after_the_grace_when_no_thread_can_be_started(refuse_new_threads) -> None:
    signals = Signals(grace_s=0.01)
    cancelled = threading.Event()
    signals.on_abandon.append(cancelled.set)
    signals.watch_grace()  # what install() does at start
    refused = refuse_new_threads()
    signals.request_stop("SIGTERM")
    assert signals.stop.is_set() and cancelled.wait(5) and signals.abandon.is_set()
    assert refused == []

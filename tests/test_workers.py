"""Reused worker threads: sequential work needs one thread, busy workers get company, and when no thread can be
started the work runs in the caller. No sleeps: every wait is on an event."""

from __future__ import annotations

import threading

import pytest

from automaton_min.workers import Workers


def run_on(workers: Workers, work) -> bool:
    done = threading.Event()
    handed_off = workers.submit(work, done)
    assert done.wait(5)
    return handed_off


def test_sequential_work_reuses_one_thread_and_starts_none(refuse_new_threads) -> None:
    workers = Workers("test")
    ran_on: list[int] = []
    assert run_on(workers, lambda: ran_on.append(threading.get_ident()))
    refused = refuse_new_threads()
    for _ in range(20):
        assert run_on(workers, lambda: ran_on.append(threading.get_ident()))
    assert refused == [] and len(set(ran_on)) == 1 and ran_on[0] != threading.get_ident()
    assert workers.idle() == 1


def test_a_busy_worker_does_not_hold_up_the_next_work() -> None:
    workers, gate, stuck_started = Workers("test"), threading.Event(), threading.Event()
    stuck_done = threading.Event()
    workers.submit(lambda: (stuck_started.set(), gate.wait(5)), stuck_done)
    assert stuck_started.wait(5)
    assert run_on(workers, lambda: None) and not stuck_done.is_set()
    gate.set()
    assert stuck_done.wait(5)


def test_without_a_free_thread_the_work_runs_in_the_caller(refuse_new_threads) -> None:
    workers, gate, stuck_done = Workers("test"), threading.Event(), threading.Event()
    workers.submit(lambda: gate.wait(5), stuck_done)  # the only worker is busy
    refused = refuse_new_threads()
    ran_on: list[int] = []
    assert run_on(workers, lambda: ran_on.append(threading.get_ident())) is False
    assert ran_on == [threading.get_ident()] and refused == ["test-2"]
    done = threading.Event()
    with pytest.raises(KeyError):
        workers.submit(lambda: {}["missing"], done)
    assert done.is_set()
    gate.set()
    assert stuck_done.wait(5)


def test_a_worker_outlives_work_that_raises(refuse_new_threads) -> None:
    workers = Workers("test")
    assert run_on(workers, lambda: {}["missing"])
    refused = refuse_new_threads()
    ran: list[bool] = []
    assert run_on(workers, lambda: ran.append(True)) and ran == [True] and refused == []


def test_workers_beyond_max_idle_end() -> None:
    workers, gate = Workers("test", max_idle=1), threading.Event()
    first, second = threading.Event(), threading.Event()
    workers.submit(lambda: gate.wait(5), first)
    workers.submit(lambda: gate.wait(5), second)  # the first is busy: a second thread
    gate.set()
    assert first.wait(5) and second.wait(5)
    assert workers.idle() == 1

"""Wake events: stored once, consumed once, and only the ones whose work is still waiting cut a sleep short."""

from __future__ import annotations

import threading

from automaton_min.clock import to_iso
from automaton_min.runtime.daemon import Signals, serve
from automaton_min.store.wake import WakeBus, consume_all, post_wake, prune_consumed, take_pending


def test_one_row_per_request_and_each_consumed_once(db, clock) -> None:
    bus = WakeBus(threading.Event())
    first = bus.request(db, "heartbeat", "Distress: critical", {"task": "heartbeat_ping"}, now_ms=clock())
    assert bus.signal.is_set() and db.scalar("SELECT COUNT(*) FROM wake_events") == 1
    clock.advance(1_000)
    events = consume_all(db, now_ms=clock())
    assert [(e.id, e.source, e.reason, e.payload) for e in events] == [(first, "heartbeat", "Distress: critical",
                                                                        {"task": "heartbeat_ping"})]
    assert consume_all(db, now_ms=clock()) == []


def test_messages_a_cycle_already_read_do_not_wake_it_again(db, clock) -> None:
    post_wake(db, "social", "1 new message from 0xabc", now_ms=clock())
    post_wake(db, "cli", "look at the logs", now_ms=clock())
    last_inbox_check = clock() + 500
    clock.advance(1_000)
    post_wake(db, "inbox", "a message after the last check", now_ms=clock())
    woken = take_pending(db, now_ms=clock(), picked_up_before_ms=last_inbox_check)
    assert [e.reason for e in woken] == ["look at the logs", "a message after the last check"]
    assert db.scalar("SELECT COUNT(*) FROM wake_events WHERE consumed_at IS NULL") == 0


def test_consumed_events_are_pruned_in_batches(db, clock) -> None:
    for i in range(5):
        post_wake(db, "cli", f"wake {i}", now_ms=clock())
    consume_all(db, now_ms=clock())
    post_wake(db, "cli", "still pending", now_ms=clock())
    clock.advance(86_400_000)
    assert prune_consumed(db, clock() - 3_600_000, batch=3) == 3
    assert prune_consumed(db, clock() - 3_600_000, batch=3) == 2
    assert db.query("SELECT reason FROM wake_events") == [("still pending",)]


class TwoCycles:
    """Runs twice: the second cycle's reason is what woke it, then asks to stop."""

    def __init__(self, signals: Signals) -> None:
        self.signals, self.reasons = signals, []

    def run_cycle(self, reason, stop, abandon=None) -> None:
        self.reasons.append(reason)
        if len(self.reasons) == 2:
            self.signals.stop.set()


def test_a_stored_wake_ends_the_sleep_with_its_reason_and_a_bare_nudge_does_not(db, clock) -> None:
    signals = Signals()
    cycle = TwoCycles(signals)
    looked = threading.Semaphore(0)
    pending: list[str] = []

    def take() -> list[str]:
        reasons, pending[:] = list(pending), []
        looked.release()
        return reasons

    runner = threading.Thread(target=serve, args=(cycle, signals, lambda: to_iso(clock() + 3_600_000)),
                              kwargs={"now": clock, "take_wakes": take})
    runner.start()
    assert looked.acquire(timeout=5) and looked.acquire(timeout=5)  # at start, and before falling asleep
    signals.nudge()  # SIGUSR1 with nothing stored: it looks, finds nothing, sleeps on
    assert looked.acquire(timeout=5) and runner.is_alive() and len(cycle.reasons) == 1
    pending.append("cli: the creator asked")
    signals.nudge()
    runner.join(5)
    assert not runner.is_alive() and cycle.reasons == ["the runtime started", "cli: the creator asked"]


def test_a_stop_cuts_the_turn_off_after_the_grace_period() -> None:
    signals = Signals(grace_s=0.01)
    cancelled = threading.Event()
    signals.on_abandon.append(cancelled.set)
    signals.request_stop("SIGTERM")
    assert signals.stop.is_set() and cancelled.wait(5) and signals.abandon.is_set()

"""The daemon's wait between cycles: event-driven, with stop and wake, and no polling."""

from __future__ import annotations

import threading

from automaton_min.clock import to_iso
from automaton_min.runtime.daemon import DEFAULT_SLEEP_S, MIN_SLEEP_S, Signals, seconds_until, serve


class RecordingCycle:
    def __init__(self, signals: Signals, *, wake_after: int | None = None, stop_after: int | None = None) -> None:
        self.signals, self.reasons = signals, []
        self.wake_after, self.stop_after = wake_after, stop_after

    def run_cycle(self, reason: str, stop: threading.Event, abandon: threading.Event | None = None) -> None:
        self.reasons.append(reason)
        if self.stop_after is not None and len(self.reasons) >= self.stop_after:
            self.signals.stop.set()
        elif self.wake_after is not None and len(self.reasons) >= self.wake_after:
            self.signals.wake.set()  # as a signal handler or the heartbeat would


def test_seconds_until(clock) -> None:
    assert seconds_until(None, clock()) == DEFAULT_SLEEP_S
    assert seconds_until(to_iso(clock() + 300_000), clock()) == 300
    assert seconds_until(to_iso(clock() - 5_000), clock()) == MIN_SLEEP_S


def test_a_wake_ends_the_sleep_at_once_and_says_why(clock) -> None:
    signals = Signals()
    cycle = RecordingCycle(signals, wake_after=1, stop_after=3)
    assert serve(cycle, signals, lambda: to_iso(clock() + 3_600_000), now=clock) == 0
    assert cycle.reasons == ["the runtime started", "something woke you early (a message or an event)",
                             "something woke you early (a message or an event)"]


def test_stop_during_a_cycle_exits_without_sleeping(clock) -> None:
    signals = Signals()
    stopped = []
    cycle = RecordingCycle(signals, stop_after=1)
    assert serve(cycle, signals, lambda: to_iso(clock() + 3_600_000), now=clock, on_stop=lambda: stopped.append(1)) == 0
    assert cycle.reasons == ["the runtime started"] and stopped == [1]


def test_stop_while_asleep_exits_promptly(clock) -> None:
    signals = Signals()
    cycle = RecordingCycle(signals)
    threading.Timer(0.05, lambda: (signals.stop.set(), signals.wake.set())).start()
    done = threading.Event()
    code: list[int] = []
    runner = threading.Thread(target=lambda: (code.append(serve(cycle, signals, lambda: to_iso(clock() + 3_600_000), now=clock)), done.set()))
    runner.start()
    assert done.wait(5), "serve did not return after stop"
    assert code == [0] and cycle.reasons == ["the runtime started"]


class FullDiskCycle(RecordingCycle):
    """The first cycle cannot write state.db (the disk is full); the next one stops the daemon."""

    def run_cycle(self, reason: str, stop: threading.Event, abandon: threading.Event | None = None) -> None:
        import apsw

        self.reasons.append(reason)
        if len(self.reasons) == 1:
            raise apsw.FullError("database or disk is full")
        self.signals.stop.set()


def test_a_full_disk_releases_the_reserve_and_tries_again_at_once(clock) -> None:
    signals = Signals()
    cycle = FullDiskCycle(signals)
    released, recovered = [], []
    code = serve(cycle, signals, lambda: None, now=clock, recover=lambda: recovered.append(1),
                 release_reserve=lambda: released.append(1) or True)
    assert code == 0 and released == [1] and recovered == [1]  # no wait for STORAGE_RETRY_S: the stop came next
    assert "released its reserve" in cycle.reasons[1]


BUSY_WAITER = """
import sys
from automaton_min.runtime.daemon import Signals
signals = Signals(grace_s=60)
signals.install()
print("ready", flush=True)
while not signals.stop.is_set():
    # Event.wait holds the event's lock at a few bytecodes where a handler may run; hold it most of the time, so
    # that a signal is certain to land there instead of once in a while
    with signals.wake._cond:
        sum(range(2000))
    signals.wake.wait(0.0001)
sys.exit(0)
"""


def test_sigterm_stops_a_daemon_busy_with_its_events_every_time() -> None:
    """A signal may be handled while the main thread holds ``wake``'s lock (inside ``Event.wait``); a handler that set
    the events itself then waited for that lock for ever (the race that made a sleeping ``run`` ignore SIGTERM now
    and then in the suite)."""
    import os
    import random
    import signal
    import subprocess
    import sys
    import time

    rng = random.Random(7)
    hung = 0
    for _ in range(12):
        proc = subprocess.Popen([sys.executable, "-c", BUSY_WAITER], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.001, 0.05))  # a random moment of the loop: that is the point of the test
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=5) == 0
        except subprocess.TimeoutExpired:
            hung += 1
            proc.kill()
            proc.wait()
    assert hung == 0, f"{hung} of 12 ignored SIGTERM"


def test_a_stop_signal_repeated_at_once_is_the_same_stop(monkeypatch) -> None:
    """Two SIGINTs at once (a terminal's Ctrl-C, and a parent such as a PyInstaller one-file bootloader forwarding
    it) must not be the "exit now" second signal."""
    import os
    import signal as signals_module

    def exit_now(code: int) -> None:
        raise AssertionError(f"exited at once with {code}")

    monkeypatch.setattr(os, "_exit", exit_now)
    signals = Signals()
    signals.on_signal(signals_module.SIGINT)
    signals.on_signal(signals_module.SIGINT)
    assert signals.stop.is_set() and not signals.abandon.is_set()

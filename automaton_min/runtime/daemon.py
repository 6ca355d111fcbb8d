"""The long-running process: wake cycles, and event-driven sleep between them.

Between cycles the main thread blocks on one ``threading.Event`` until the sleep
timer (``sleep_until``) runs out, something wakes the agent, or a stop is asked for:
no polling, no CPU while asleep. SIGTERM and SIGINT let the current turn finish,
then the process exits 0. SIGUSR1 wakes a sleeping agent (a message arrived, say);
later the heartbeat and the relay set the same event from their own threads.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, field
from typing import Callable, Protocol

from automaton_min.clock import Clock, from_iso, system_now
from automaton_min.observe.log import get_logger

log = get_logger(__name__)

MIN_SLEEP_S = 10
DEFAULT_SLEEP_S = 60


class Cycle(Protocol):
    def run_cycle(self, reason: str, stop: threading.Event): ...


@dataclass
class Signals:
    """The two events the daemon waits on; handlers and other threads only ever set them."""

    stop: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)

    def install(self) -> None:
        """Route SIGTERM/SIGINT to stop and SIGUSR1 to wake (main thread only)."""
        def stopping(signum, frame) -> None:
            log.info("stop requested", extra={"signal": signal.Signals(signum).name})
            self.stop.set()
            self.wake.set()

        signal.signal(signal.SIGTERM, stopping)
        signal.signal(signal.SIGINT, stopping)
        signal.signal(signal.SIGUSR1, lambda signum, frame: self.wake.set())


def seconds_until(sleep_until: str | None, now_ms: int) -> float:
    """How long to sleep for a stored ``sleep_until`` (at least ``MIN_SLEEP_S``; a default when unset)."""
    if not sleep_until:
        return DEFAULT_SLEEP_S
    return max((from_iso(sleep_until) - now_ms) / 1000, MIN_SLEEP_S)


def serve(cycle: Cycle, signals: Signals, sleep_until: Callable[[], str | None], *, now: Clock = system_now,
          on_stop: Callable[[], None] | None = None, max_cycles: int | None = None) -> int:
    """Run wake cycles until stopped; returns the process exit code."""
    reason = "the runtime started"
    cycles = 0
    try:
        while not signals.stop.is_set():
            cycle.run_cycle(reason, signals.stop)
            cycles += 1
            if signals.stop.is_set() or (max_cycles is not None and cycles >= max_cycles):
                break
            wait_s = seconds_until(sleep_until(), now())
            log.info("asleep", extra={"seconds": round(wait_s, 1)})
            woken = signals.wake.wait(wait_s)
            signals.wake.clear()
            if signals.stop.is_set():
                break
            reason = "something woke you early (a message or an event)" if woken else "your sleep timer ran out"
    finally:  # also when a cycle raises (a configuration error): the agent is left stopped, not "running"
        if on_stop is not None:
            on_stop()
    log.info("stopped", extra={"cycles": cycles})
    return 0

"""The long-running process: wake cycles, and event-driven sleep between them (README: The service).

A cycle that cannot write ``state.db`` (disk full, a failed write, a read-only file system) does not end it: the
transaction rolls back and ``recover`` puts the turn's inbox messages back; then a held disk reserve is released and
the next cycle starts at once, or else one error names the file and the fix and it waits ``STORAGE_RETRY_S`` or a wake.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from automaton_min.clock import Clock, from_iso, system_now
from automaton_min.confine.libc import trim_heap
from automaton_min.log import get_logger
from automaton_min.memory.tokens import unload as unload_exact_counter
from automaton_min.store.db import STORAGE_ERRORS

log = get_logger(__name__)

MIN_SLEEP_S = 10
DEFAULT_SLEEP_S = 60
SHUTDOWN_GRACE_S = 30.0
EARLY_WAKE = "something woke you early (a message or an event)"
STORAGE_RETRY_S = 60
SAME_STOP_S = 1.0  # a stop signal this soon after the first is the same stop, not the "exit now" second one


class Cycle(Protocol):
    def run_cycle(self, reason: str, stop: threading.Event, abandon: threading.Event | None = None): ...


@dataclass
class Signals:
    """The events the daemon waits on; handlers and other threads only ever set them.

    ``stop``: finish the turn and exit (``on_stop`` then runs: cutting calls that need not finish). ``abandon``: set
    ``grace_s`` after ``stop`` by the ``shutdown-grace`` thread ``install`` starts ahead (no thread is started at stop);
    ``on_abandon`` then runs. ``wake``: look at the wake events now; ``on_nudge`` also runs on SIGUSR1."""

    stop: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)
    abandon: threading.Event = field(default_factory=threading.Event)
    grace_s: float = SHUTDOWN_GRACE_S
    on_stop: list[Callable[[], None]] = field(default_factory=list)
    on_abandon: list[Callable[[], None]] = field(default_factory=list)
    on_nudge: list[Callable[[], None]] = field(default_factory=list)
    _grace_watcher: threading.Thread | None = field(default=None, init=False, repr=False)
    _stop_signalled_at: float = field(default=0.0, init=False, repr=False)

    def request_stop(self, why: str) -> None:
        """Stop after the turn under way; cut it off if it is still running after ``grace_s``."""
        if self.stop.is_set():
            return
        log.info("stop requested", extra={"why": why, "grace_s": self.grace_s})
        self.stop.set()
        self.wake.set()
        self.watch_grace()  # already started by install(); only a Signals never installed starts it now
        for callback in self.on_stop:
            callback()

    def watch_grace(self) -> None:
        """Start, once, the thread that cuts a stopping turn off ``grace_s`` after ``stop`` is set."""
        if self._grace_watcher is not None:
            return
        watcher = threading.Thread(target=self._await_grace, name="shutdown-grace", daemon=True)
        watcher.start()
        self._grace_watcher = watcher

    def _await_grace(self) -> None:
        self.stop.wait()
        if not self.abandon.wait(self.grace_s):
            self._abandon()

    def _abandon(self) -> None:
        if self.abandon.is_set():
            return
        log.warning("the turn under way did not finish in time: cutting it off", extra={"grace_s": self.grace_s})
        self.abandon.set()
        for callback in self.on_abandon:
            callback()

    def nudge(self) -> None:
        """Something was stored for the daemon to look at (a wake event, a task to run now)."""
        self.wake.set()
        for callback in self.on_nudge:
            callback()

    def install(self) -> None:
        """Route SIGTERM/SIGINT to stop (a second one exits at once) and SIGUSR1 to nudge (main thread only); start the
        grace watcher. Handlers do nothing: the ``signals`` thread reads the ``set_wakeup_fd`` pipe, since a handler
        setting an event could run while the main thread holds that event's lock, and wait for ever."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        for signum in HANDLED:
            signal.signal(signum, _noted)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(read_fd,), name="signals", daemon=True).start()
        self.watch_grace()

    def _watch(self, read_fd: int) -> None:
        while True:
            for signum in os.read(read_fd, 64):
                self.on_signal(signum)

    def on_signal(self, signum: int) -> None:
        """What a signal means; called on the ``signals`` thread, never inside a signal handler."""
        if signum == signal.SIGUSR1:
            self.nudge()
            return
        if signum not in HANDLED:
            return
        name = signal.Signals(signum).name
        if self.stop.is_set():
            if time.monotonic() - self._stop_signalled_at < SAME_STOP_S:
                return  # the one-file binary's bootloader forwards the Ctrl-C the terminal also sent us
            log.warning("second stop signal: exiting now", extra={"signal": name})
            os._exit(128 + signum)
        self._stop_signalled_at = time.monotonic()
        self.request_stop(name)


HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def _noted(signum: int, frame: object) -> None:
    """The Python-level handler: nothing to do here, the wakeup pipe already carries the signal."""


def seconds_until(sleep_until: str | None, now_ms: int) -> float:
    """How long to sleep for a stored ``sleep_until`` (at least ``MIN_SLEEP_S``; a default when unset)."""
    if not sleep_until:
        return DEFAULT_SLEEP_S
    return max((from_iso(sleep_until) - now_ms) / 1000, MIN_SLEEP_S)


def serve(cycle: Cycle, signals: Signals, sleep_until: Callable[[], str | None], *, now: Clock = system_now,
          on_stop: Callable[[], None] | None = None, max_cycles: int | None = None,
          take_wakes: Callable[[], list[str]] | None = None, tick: Callable[[], None] | None = None,
          tick_s: float | None = None, status: Callable[[str], object] | None = None,
          recover: Callable[[], object] | None = None, storage: str = "state.db",
          release_reserve: Callable[[], bool] | None = None) -> int:
    """Run wake cycles until stopped; returns the process exit code.

    ``take_wakes`` consumes pending wake events, returning their reasons (none given: every wake counts); ``tick``
    runs at least every ``tick_s`` while asleep and between cycles (the watchdog); ``status`` hears systemd's STATUS=.
    ``recover`` runs before the cycle after a failed write to ``storage``, at once if ``release_reserve`` freed room."""
    early = take_wakes() if take_wakes else []
    reason = "; ".join(["the runtime started", *early])
    cycles = 0
    storage_failed = False
    try:
        while not signals.stop.is_set():
            if tick:
                tick()
            if status:
                status(f"awake: {reason}"[:200])
            try:
                if storage_failed and recover is not None:
                    recover()
                storage_failed = False
                cycle.run_cycle(reason, signals.stop, signals.abandon)
                cycles += 1
                if signals.stop.is_set() or (max_cycles is not None and cycles >= max_cycles):
                    break
                reason = _sleep(signals, sleep_until, now, take_wakes, tick, tick_s, status)
            except STORAGE_ERRORS as exc:
                storage_failed = True
                if release_reserve is not None and release_reserve():
                    log.warning(f"cannot write {storage} ({exc}): released the disk reserve, trying again now",
                                extra={"error": str(exc), "path": storage})
                    reason = ("the disk holding your home filled up and a turn could not be saved; the runtime "
                              "released its reserve: free space (look at du -sh * in your workspace)")
                    continue
                reason = _wait_for_storage(signals, exc, storage, tick, tick_s, status)
    finally:  # also when a cycle raises (a configuration error): the agent is left stopped, not "running"
        if on_stop is not None:
            on_stop()
    log.info("stopped", extra={"cycles": cycles})
    return 0


def _wait_for_storage(signals: Signals, exc: Exception, storage: str, tick: Callable[[], None] | None,
                      tick_s: float | None, status: Callable[[str], object] | None) -> str:
    """After a failed write: one error with the fix, then wait ``STORAGE_RETRY_S`` (or a wake, or a stop) without
    touching the database; returns the next cycle's reason."""
    log.error(f"cannot write {storage} ({exc}): the disk may be full; free some space on it (df -h), "
              f"the agent tries again in {STORAGE_RETRY_S} s or when woken (automaton-min wake)",
              extra={"error": str(exc), "path": storage, "retry_s": STORAGE_RETRY_S})
    if status:
        status(f"cannot write {storage}: waiting for disk space"[:200])
    deadline = time.monotonic() + STORAGE_RETRY_S
    while not signals.stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        woken = signals.wake.wait(min(remaining, tick_s) if tick_s else remaining)
        if tick:
            tick()
        if woken:
            signals.wake.clear()
            break
    return f"trying again after the database could not be written ({exc})"


def _sleep(signals: Signals, sleep_until: Callable[[], str | None], now: Clock,
           take_wakes: Callable[[], list[str]] | None, tick: Callable[[], None] | None, tick_s: float | None,
           status: Callable[[str], object] | None = None) -> str:
    """Wait until the timer runs out, a wake event arrives or a stop; returns the next cycle's reason."""
    if take_wakes is None:  # no wake events to look at: a wake set during the cycle counts
        if signals.wake.is_set() and not signals.stop.is_set():
            signals.wake.clear()
            return EARLY_WAKE
    else:
        signals.wake.clear()  # before looking: a wake stored after the look sets the event again
        pending = take_wakes()
        if pending:
            return "; ".join(pending)
    wait_s = seconds_until(sleep_until(), now())
    unload_exact_counter()  # 2 MB that only a waking turn may need again
    trim_heap()  # what the cycle freed goes back to the system while the agent sleeps
    log.info("asleep", extra={"seconds": round(wait_s, 1)})
    if status:
        status(f"asleep for {round(wait_s)} s")
    deadline = time.monotonic() + wait_s
    while not signals.stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "your sleep timer ran out"
        woken = signals.wake.wait(min(remaining, tick_s) if tick_s else remaining)
        if tick:
            tick()
        if not woken or signals.stop.is_set():
            continue
        signals.wake.clear()
        if take_wakes is None:
            return EARLY_WAKE
        pending = take_wakes()
        if pending:
            return "; ".join(pending)
    return "stopping"

"""Reusable daemon threads: work goes to an idle one, and a thread is started only when none is idle.

A worker is idle again *before* it sets its events, so sequential work never needs a second thread. When no thread can
be started (the pids cgroup full) the work runs in the caller, past any deadline or cancel the caller meant to keep.
"""

from __future__ import annotations

import itertools
import threading
from queue import SimpleQueue
from typing import Callable

from automaton_min.log import get_logger

log = get_logger(__name__)

Work = Callable[[], None]
_Handoff = tuple[Work, tuple[threading.Event, ...]]

DEFAULT_MAX_IDLE = 4


class Workers:
    """A pool of long-lived daemon threads named ``<name>-<n>``; at most ``max_idle`` of them wait for work."""

    def __init__(self, name: str, *, max_idle: int = DEFAULT_MAX_IDLE) -> None:
        self.name = name
        self.max_idle = max_idle
        self._idle: list[SimpleQueue[_Handoff]] = []
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)

    def submit(self, work: Work, *done: threading.Event) -> bool:
        """Run ``work`` on a worker, then set every ``done``; True when a thread took it (an exception escaping is
        logged). False: ``work`` already ran inline, and its exception propagates after the events are set."""
        with self._lock:
            idle = self._idle.pop() if self._idle else None
        if idle is not None:
            idle.put((work, done))
            return True
        inbox: SimpleQueue[_Handoff] = SimpleQueue()
        inbox.put((work, done))
        try:
            threading.Thread(target=self._serve, args=(inbox,), name=f"{self.name}-{next(self._numbers)}",
                             daemon=True).start()
        except RuntimeError as exc:
            log.warning("no thread could be started: the work runs in the caller, beyond any deadline",
                        extra={"workers": self.name, "error": str(exc)})
            try:
                work()
            finally:
                _set_all(done)
            return False
        return True

    def idle(self) -> int:
        """How many workers wait for work now."""
        with self._lock:
            return len(self._idle)

    def _serve(self, inbox: SimpleQueue[_Handoff]) -> None:
        parked = True
        while parked:
            work, done = inbox.get()
            parked = False
            try:
                try:
                    work()
                except Exception:  # noqa: BLE001 - the loop's outer boundary: a worker outlives the work it runs
                    log.exception("work run by a worker raised", extra={"workers": self.name})
                parked = self._park(inbox)
            finally:  # also when a BaseException ends this thread: whoever waits hears that the work ended
                _set_all(done)

    def _park(self, inbox: SimpleQueue[_Handoff]) -> bool:
        """Put the calling worker back on the idle list; False: enough are idle already, it ends instead."""
        with self._lock:
            if len(self._idle) >= self.max_idle:
                return False
            self._idle.append(inbox)
            return True


def _set_all(events: tuple[threading.Event, ...]) -> None:
    for event in events:
        event.set()

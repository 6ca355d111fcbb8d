"""systemd notifications (``sd_notify``) and the watchdog, in a few lines of our own (README: Observability).

Each watched thread owns a ``Progress`` and ticks it; one that sleeps wakes at least every ``Watchdog.tick_every``
seconds to tick. Without ``$NOTIFY_SOCKET`` every call does nothing and returns False.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Callable, Mapping, Sequence

from automaton_min.log import get_logger

log = get_logger(__name__)

Monotonic = Callable[[], float]


class Notifier:
    """Sends state lines to systemd; a no-op when ``address`` is None."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> "Notifier":
        """The notifier ``$NOTIFY_SOCKET`` names; a no-op one when it is unset or names no UNIX socket."""
        value = (os.environ if environ is None else environ).get("NOTIFY_SOCKET", "")
        if not value:
            return cls(None)
        if not (value.startswith("/") or value.startswith("@")):
            log.warning("NOTIFY_SOCKET is not a UNIX socket path; systemd notifications are off",
                        extra={"value": value[:100]})
            return cls(None)
        return cls(value)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *assignments: str) -> bool:
        """Send ``KEY=value`` lines in one datagram; True when it was sent. A failure is logged, never raised."""
        if self.address is None:
            return False
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        payload = "\n".join(assignments).encode("utf-8", "replace")
        with self._lock:
            try:
                if self._socket is None:
                    self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._socket.sendto(payload, target)
            except OSError as exc:
                log.warning("systemd notification not sent", extra={"what": payload[:40].decode("utf-8", "replace"),
                                                                     "error": str(exc)})
                return False
        return True

    def ready(self) -> bool:
        return self.notify("READY=1")

    def status(self, text: str) -> bool:
        """``STATUS=`` shown by ``systemctl status``; one line (line breaks become spaces)."""
        return self.notify("STATUS=" + " ".join(text.splitlines()))

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def close(self) -> None:
        with self._lock:
            if self._socket is not None:
                self._socket.close()
                self._socket = None


def watchdog_interval(environ: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """``$WATCHDOG_USEC`` in seconds, when it is set, positive, and meant for this process (``$WATCHDOG_PID``)."""
    env = os.environ if environ is None else environ
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    owner = env.get("WATCHDOG_PID")
    if usec <= 0 or (owner and owner.strip() != str(os.getpid() if pid is None else pid)):
        return None
    return usec / 1_000_000


class Progress:
    """When one thread last showed it is alive; ``tick`` from that thread."""

    def __init__(self, name: str, *, monotonic: Monotonic = time.monotonic) -> None:
        self.name = name
        self._monotonic = monotonic
        self.last = monotonic()

    def tick(self) -> None:
        self.last = self._monotonic()  # one float assignment: safe without a lock

    def age(self) -> float:
        return self._monotonic() - self.last


class Watchdog:
    """Pings systemd's watchdog from its own thread while every ``Progress`` is fresh."""

    def __init__(self, notifier: Notifier, sources: Sequence[Progress], interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError("the watchdog interval must be positive")
        self.notifier = notifier
        self.sources = tuple(sources)
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stalled: frozenset[str] = frozenset()
        self.after_first_ping: Callable[[], None] | None = None  # called once, on this thread, after the first ping

    @classmethod
    def from_environment(cls, notifier: Notifier, sources: Sequence[Progress],
                         environ: Mapping[str, str] | None = None) -> "Watchdog | None":
        """A watchdog when systemd asked for one (``$WATCHDOG_USEC``) and notifications work; else None."""
        interval = watchdog_interval(environ)
        return cls(notifier, sources, interval) if interval and notifier.enabled else None

    @property
    def tick_every(self) -> float:
        """How often a waiting thread must wake to tick its ``Progress``: the ping period."""
        return self.interval_s / 2

    def check(self) -> bool:
        """One round: ping when every source ticked within the interval; True when a ping was sent."""
        stalled = frozenset(s.name for s in self.sources if s.age() > self.interval_s)
        if stalled != self._stalled:
            if stalled:
                log.error("a thread shows no progress; withholding the watchdog ping so systemd restarts the service",
                          extra={"threads": sorted(stalled), "interval_s": self.interval_s})
            else:
                log.info("every thread shows progress again; watchdog pings resume")
            self._stalled = stalled
        pinged = not stalled and self.notifier.watchdog()
        if pinged and self.after_first_ping is not None:
            then, self.after_first_ping = self.after_first_ping, None
            then()
        return pinged

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.tick_every):
            try:
                self.check()
            except Exception:  # the thread's outer boundary: log and keep watching
                log.exception("watchdog check failed")

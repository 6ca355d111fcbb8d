"""Whether the system clock can be believed (README: Social relay, freshness): asked before any decision that
compares a signed time with now. The relay's intake waits while it cannot; ``status`` and ``doctor`` say why.

A Raspberry Pi has no battery clock: it boots at the time saved at its last shutdown, and only NTP makes it right.
So the clock is not trusted while a time service on this machine has not synchronized it since boot, nor when it
reads earlier than this release or than a time this agent has already seen. Where no time service runs at all (a
virtual machine that takes the host's clock), the clock is believed unless it went back. ``trustSystemClock`` in
the config believes it always (a machine whose time is set by hand or by an RTC board, with no NTP).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from automaton_min.clock import HOUR_MS, MINUTE_MS, from_iso, to_iso
from automaton_min.store.kv import get_value, set_value

if TYPE_CHECKING:
    from automaton_min.store.db import Database

EARLIEST_MS = from_iso("2026-11-01T00:00:00.000Z")  # no right clock reads earlier than this release
HIGH_WATER_KEY = "clock_high_water"  # the latest time this agent has seen, written at most hourly
HIGH_WATER_STEP_MS = HOUR_MS
SET_BACK_SLACK_MS = 5 * MINUTE_MS
TIMESYNCD_SYNCED = Path("/run/systemd/timesync/synchronized")  # touched on each sync since boot
# a time service by its process name (comm, cut at 15 characters) and the directories it keeps, which stay visible
# where systemd's ProtectProc= hides its process from the service's user
SYNC_DAEMONS = {"systemd-timesyn": ("/var/lib/systemd/timesync",), "chronyd": ("/var/lib/chrony", "/run/chrony"),
                "ntpd": ("/var/lib/ntp", "/var/lib/ntpsec"), "ntpd-rs": ("/var/lib/ntpd-rs",), "openntpd": ()}
TIME_ERROR = 5  # adjtimex: the kernel's clock is not synchronized
CLOCK_FIX = ("check `date -u`; start NTP (timedatectl set-ntp true) and wait for it to synchronize, or, where the "
             "time is set by hand or by a clock board and is right: automaton-min config set trustSystemClock true")


@dataclass(frozen=True)
class ClockReading:
    trusted: bool
    why: str


def kernel_synced() -> bool | None:
    """What the kernel says of its clock, or None when it may not be asked (systemd's ProtectClock=)."""
    buffer = ctypes.create_string_buffer(512)  # struct timex, read only: modes 0
    try:
        state = ctypes.CDLL(None, use_errno=True).adjtimex(buffer)
    except (OSError, AttributeError):
        return None
    return None if state < 0 else state != TIME_ERROR


def sync_daemon() -> str | None:
    """The time service this machine runs: one whose process is seen, or, where other users' processes are hidden
    (ProtectProc=), one whose directories are there. A service installed but not running is none."""
    running = _running_names()
    for name, marks in SYNC_DAEMONS.items():
        if name in (running or ()) or (running is None and any(Path(mark).is_dir() for mark in marks)):
            return name
    return None


def _running_names() -> frozenset[str] | None:
    """The names of the system's daemons (processes whose parent is pid 1: a command's background job has the
    spawner for parent, so a job named ``chronyd`` does not count); None when pid 1 is out of sight (others'
    processes hidden)."""
    if not os.path.exists("/proc/1/comm"):
        return None
    names = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            name, _, rest = stat.partition(b" (")[2].rpartition(b") ")
            if rest.split()[1:2] == [b"1"]:
                names.add(name.decode("utf-8", "replace"))
    return frozenset(names)


def synced_since_boot() -> bool:
    return TIMESYNCD_SYNCED.exists() or kernel_synced() is True


@dataclass(frozen=True)
class ClockTrust:
    """Reads the clock's standing; the probes are parameters so a test can be any machine."""

    daemon: Callable[[], str | None] = sync_daemon
    synced: Callable[[], bool] = synced_since_boot
    trust_always: bool = False  # config trustSystemClock

    @classmethod
    def of(cls, config: Any) -> "ClockTrust":
        return cls(trust_always=config is not None and config.get("trustSystemClock") is True)

    def reading(self, db: "Database", now_ms: int) -> ClockReading:
        if now_ms < EARLIEST_MS:
            return ClockReading(False, f"the clock reads {to_iso(now_ms)}, before this release was made; set the "
                                       "time (timedatectl set-ntp true) and the relay is polled once it is right")
        if self.trust_always:
            return ClockReading(True, "believed as set (trustSystemClock)")
        service, synced = self.daemon(), self.synced()
        if service and not synced:
            return ClockReading(False, f"{service} has not synchronized the clock since boot (no battery clock "
                                       "keeps it); relay messages wait until it has (timedatectl timesync-status)")
        seen = self.latest_seen(db)
        if not synced and seen is not None and now_ms < seen - SET_BACK_SLACK_MS:
            return ClockReading(False, f"the clock reads {to_iso(now_ms)}, earlier than {to_iso(seen)}, which this "
                                       "agent has already seen; relay messages wait until the clock is right")
        if synced:
            return ClockReading(True, "synchronized")
        return ClockReading(True, "no time service synchronizes it here; believed while it does not go back")

    @staticmethod
    def latest_seen(db: "Database") -> int | None:
        """The latest time this agent has seen (within the hour it is written at), or None."""
        seen = get_value(db, HIGH_WATER_KEY)
        return from_iso(seen) if seen else None

    @classmethod
    def note(cls, db: "Database", now_ms: int) -> None:
        """Remember ``now_ms`` as seen, at most once an hour (few disk writes)."""
        seen = cls.latest_seen(db)
        if seen is None or now_ms >= seen + HIGH_WATER_STEP_MS:
            set_value(db, HIGH_WATER_KEY, to_iso(now_ms), now_ms)

"""Whether the system clock can be believed (README: Social relay, freshness): asked before any decision that
compares a signed time with now. The relay's intake waits while it cannot; ``status`` and ``doctor`` say why.

A Raspberry Pi has no battery clock: it boots at the time saved at its last shutdown, and only NTP makes it right.
So the clock is not trusted while a time service on this machine has not synchronized it since boot, nor when it
reads earlier than this release or than a time this agent has already seen. Where no time service runs at all (a
virtual machine that takes the host's clock), the clock is believed unless it went back.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from automaton_min.clock import from_iso, to_iso
from automaton_min.store.kv import get_value, set_value

if TYPE_CHECKING:
    from automaton_min.store.db import Database

EARLIEST_MS = from_iso("2026-11-01T00:00:00.000Z")  # no right clock reads earlier than this release
HIGH_WATER_KEY = "clock_high_water"  # the latest time this agent has seen, written at most hourly
HIGH_WATER_STEP_MS = 3_600_000
SET_BACK_SLACK_MS = 5 * 60_000
TIMESYNCD_STATE = Path("/var/lib/systemd/timesync")  # present where systemd-timesyncd keeps this machine's time
TIMESYNCD_SYNCED = Path("/run/systemd/timesync/synchronized")  # touched on each sync since boot
SYNC_DAEMONS = frozenset({"chronyd", "ntpd", "ntpd-rs", "openntpd", "systemd-timesyn"})  # comm is cut at 15
TIME_ERROR = 5  # adjtimex: the kernel's clock is not synchronized


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
    """The time service this machine runs, if one can be seen (systemd-timesyncd by its state directory, since
    ProtectProc= hides other processes from the service)."""
    if TIMESYNCD_STATE.is_dir():
        return "systemd-timesyncd"
    try:
        pids = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if name in SYNC_DAEMONS:
            return name
    return None


def synced_since_boot() -> bool:
    return TIMESYNCD_SYNCED.exists() or kernel_synced() is True


@dataclass(frozen=True)
class ClockTrust:
    """Reads the clock's standing; the probes are parameters so a test can be any machine."""

    daemon: Callable[[], str | None] = sync_daemon
    synced: Callable[[], bool] = synced_since_boot

    def reading(self, db: "Database", now_ms: int) -> ClockReading:
        if now_ms < EARLIEST_MS:
            return ClockReading(False, f"the clock reads {to_iso(now_ms)}, before this release was made; set the "
                                       "time (timedatectl set-ntp true) and the relay is polled once it is right")
        service, synced = self.daemon(), self.synced()
        if service and not synced:
            return ClockReading(False, f"{service} has not synchronized the clock since boot (no battery clock "
                                       "keeps it); relay messages wait until it has (timedatectl timesync-status)")
        seen = get_value(db, HIGH_WATER_KEY)
        if not synced and seen and now_ms < from_iso(seen) - SET_BACK_SLACK_MS:
            return ClockReading(False, f"the clock reads {to_iso(now_ms)}, earlier than {seen}, which this agent "
                                       "has already seen; relay messages wait until the clock is right")
        if synced:
            return ClockReading(True, "synchronized")
        return ClockReading(True, "no time service synchronizes it here; taken as right (it never went back)")

    @staticmethod
    def note(db: "Database", now_ms: int) -> None:
        """Remember ``now_ms`` as seen, at most once an hour (few disk writes)."""
        seen = get_value(db, HIGH_WATER_KEY)
        if seen is None or now_ms >= from_iso(seen) + HIGH_WATER_STEP_MS:
            set_value(db, HIGH_WATER_KEY, to_iso(now_ms), now_ms)

"""One ``run`` per home: an exclusive ``flock`` on ``<home>/run.lock``, which holds the runner's pid (README: Commands).
The pid is read only while the lock is held; ``status`` tests the lock instead of trusting it.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from pathlib import Path

from automaton_min.errors import UserError
from automaton_min.home import Home

LOCK_NAME = "run.lock"
# status holds a shared lock for a moment while it tests; a starting run tries a few times before giving up.
ACQUIRE_TRIES = 5
ACQUIRE_PAUSE_S = 0.05


class AlreadyRunning(UserError):
    """Another ``run`` holds this home's lock."""


def lock_path(home: Home) -> Path:
    return home.root / LOCK_NAME


class RunLock:
    """Held from ``acquire`` until ``release`` or the end of the process."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.fd: int | None = None

    def acquire(self) -> None:
        """Take the lock and write our pid, or raise ``AlreadyRunning`` naming the holder's pid."""
        fd = os.open(lock_path(self.home), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        for attempt in range(ACQUIRE_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt + 1 < ACQUIRE_TRIES:
                    time.sleep(ACQUIRE_PAUSE_S)
        else:
            pid = _read_pid(fd)
            os.close(fd)
            who = f"pid {pid}" if pid else "another process"
            raise AlreadyRunning(f"automaton-min run is already running on {self.home.root} ({who}); "
                                 f"stop it first (kill {pid or '<pid>'}), or pass --home with another home")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing the last descriptor drops the flock
            self.fd = None


def run_holder(home: Home) -> tuple[bool, int | None]:
    """(running, pid): whether a ``run`` holds this home's lock, and its pid when it has written it."""
    try:
        fd = os.open(lock_path(home), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False, None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True, _read_pid(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False, None
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def nudge_daemon(home: "Home") -> int | None:
    """Tell the running daemon of ``home`` to look at its wake events (SIGUSR1); its pid, or None if none runs."""
    running, pid = run_holder(home)
    if not running or not pid:
        return None
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        return None
    return pid

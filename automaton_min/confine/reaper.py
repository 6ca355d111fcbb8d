"""Ending every process below this one: what a command started must not outlive its call or the agent (README:
Security).

The tree is walked through ``/proc/<pid>/task/<tid>/children``; this process is a child subreaper, so orphans stay in
the walk. Processes in ``spare`` (and everything below them) are left alone.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from collections.abc import Collection

from automaton_min.confine.libc import PR_SET_CHILD_SUBREAPER, libc, prctl

END_WITHIN_S = 5.0
_POLL_S = 0.01
PR_GET_CHILD_SUBREAPER = 37


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (every thread's); empty when it is gone."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as handle:
                found += [int(child) for child in handle.read().split()]
        except OSError:
            continue
    return found


def descendants(root: int, spare: Collection[int] = ()) -> list[int]:
    """Every process below ``root``, parents before their children, leaving out ``spare`` and what is below it."""
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children(todo.pop()):
            if child not in spare and child not in found:
                found.append(child)
                todo.append(child)
    return found


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def reap() -> int:
    """Collect this process's children that have ended (never blocks); how many."""
    reaped = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped += 1


def end_tree(root: int, *, include_root: bool = False, spare: Collection[int] = (), within_s: float = END_WITHIN_S,
             reap_any: bool = True) -> int:
    """Stop, then kill, every process below ``root`` (``include_root``: it too) but ``spare``, within ``within_s`` (the
    rest is the next call's); returns how many died. ``reap_any`` (where nothing else waits): reap any ended child."""
    deadline = time.monotonic() + within_s
    stopped: list[int] = [root] if include_root else []
    for pid in stopped:
        _signal(pid, signal.SIGSTOP)
    while time.monotonic() < deadline:
        fresh = [pid for pid in descendants(root, spare) if pid not in stopped]
        if not fresh:
            break
        for pid in fresh:
            _signal(pid, signal.SIGSTOP)
        stopped += fresh
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    pause = threading.Event()
    while time.monotonic() < deadline:
        if reap_any:
            reap()
        if not any(alive(pid) for pid in stopped):
            break
        pause.wait(_POLL_S)
    return len(stopped)


def end_descendants(spare: Collection[int] = (), within_s: float = END_WITHIN_S) -> int:
    """Everything below this process except ``spare``, ended and reaped (the confined spawner after a call)."""
    return end_tree(os.getpid(), spare=spare, within_s=within_s)


def alive(pid: int) -> bool:
    """Still running (a zombie waiting to be reaped does not count)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def become_subreaper() -> None:
    """Orphans of this process's descendants come to it, not to PID 1 (``automaton-min run`` and the spawner)."""
    prctl(PR_SET_CHILD_SUBREAPER, 1, "prctl(PR_SET_CHILD_SUBREAPER)")


def is_subreaper() -> bool:
    flag = ctypes.c_int(0)
    return libc().prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0 and flag.value == 1

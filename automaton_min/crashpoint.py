"""A test-only crash hook: ``crash_point(name)`` kills this process with SIGKILL when ``AUTOMATON_CRASH_AT`` names it
(README: Reliability). Unset, as in every real run, it is a near-free no-op: the variable is read once, at import.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

_SPEC = os.environ.get("AUTOMATON_CRASH_AT", "")
_NAME, _, _NTH = _SPEC.partition(":")
_TARGET = int(_NTH) if _NTH.strip().isdigit() else 1
_lock = threading.Lock()
_reached = 0


def crash_point(name: str) -> None:
    """SIGKILL this process at the chosen point (see the module docstring); nothing otherwise."""
    if not _NAME or name != _NAME:
        return
    global _reached
    with _lock:
        _reached += 1
        if _reached < _TARGET:
            return
    sys.stderr.write(f"crash point {name} reached ({_reached}): SIGKILL\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)

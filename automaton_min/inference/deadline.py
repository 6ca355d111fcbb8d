"""One overall deadline for an inference call, run on a reused worker, and a way for a stop to cut it short.

A call given up on is abandoned, not killed: its HTTP layer has the same deadline, and a late answer is dropped. With
no worker to be had (the pids cgroup full) it runs in the caller, bounded by that HTTP deadline alone, and its answer
counts even if a stop came meanwhile.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, TypeVar

from automaton_min.inference.types import InferenceError
from automaton_min.workers import Workers

T = TypeVar("T")

CANCEL_CHECK_S = 0.1  # how often a waiting caller looks at the stop event

_WORKERS = Workers("inference-call")


class InferenceTimeout(InferenceError):
    """No answer within the call's deadline (all attempts together)."""


class InferenceCancelled(InferenceError):
    """A stop was asked for while the call was waiting for the model."""


def call_with_deadline(call: Callable[[], T], deadline_s: float, *, cancel: threading.Event | None = None,
                       what: str = "the model", monotonic: Callable[[], float] = time.monotonic) -> T:
    """``call()``'s result or exception, unless ``deadline_s`` passes or ``cancel`` is set first."""
    done = threading.Event()
    outcome: dict[str, object] = {}

    def work() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the waiting caller, which re-raises it
            outcome["error"] = exc

    ends = monotonic() + deadline_s  # before the call starts, so it never ends after the HTTP layer's deadline
    _WORKERS.submit(work, done)
    while not done.is_set():
        left = ends - monotonic()
        if left <= 0:
            raise InferenceTimeout(f"no answer from {what} within {deadline_s:g} s (all attempts together)")
        if cancel is not None and cancel.is_set():
            raise InferenceCancelled(f"stopped while waiting for {what}")
        done.wait(min(left, CANCEL_CHECK_S) if cancel is not None else left)
    if "error" in outcome:
        if monotonic() >= ends:  # the HTTP layer's own deadline fired first while this caller was not yet awake
            raise InferenceTimeout(f"no answer from {what} within {deadline_s:g} s (all attempts together)") \
                from outcome["error"]  # type: ignore[misc]
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]

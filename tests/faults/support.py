"""Shared pieces of the fault tests: the clock for the agent and the resilient HTTP layer (the fixture
``fault_clock``), the scripted model (``model``; a module that puts a fault proxy in front overrides it), and helpers.

``FaultClock`` is the agent's clock (epoch ms, like ``conftest.FixedClock``) and also the resilient layer's
monotonic clock, wall clock and ``sleep``: a retry's wait is recorded in ``waits`` and moves the one clock
forward instead of sleeping, so a test can assert how long the runtime chose to wait (Retry-After, backoff)
without waiting, and the breaker's open period passes when the test says so. Socket timeouts stay real (they
are the kernel's), which is why the hung-server tests use short deadlines, not this clock.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conftest import FixedClock
from standins.model_servers import OpenAIServer

# Every model name the router may pick, so any tier's turn reaches the scripted stand-in.
SCRIPTED = {"inferenceModel": "scripted-model", "lowComputeModel": "scripted-model", "criticalModel": "scripted-model"}


class FaultClock(FixedClock):
    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self.ms / 1000

    def wall(self) -> float:
        return self.ms / 1000

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.advance(int(seconds * 1000))


@pytest.fixture
def fault_clock(monkeypatch: pytest.MonkeyPatch) -> FaultClock:
    """The one clock; every ``ResilientHttp`` built from now on (inference, Conway, relay) waits on it, and the
    circuit breakers measure their open period on it."""
    from automaton_min.net import resilient

    clock = FaultClock()

    class ClockedHttp(resilient.ResilientHttp):
        def __init__(self, service: str, **options) -> None:
            options.setdefault("sleep", clock.sleep)
            options.setdefault("now", clock.monotonic)
            options.setdefault("wall_now", clock.wall)
            super().__init__(service, **options)

    monkeypatch.setattr(resilient, "ResilientHttp", ClockedHttp)
    monkeypatch.setattr(resilient, "_registry", resilient.BreakerRegistry(now=clock.monotonic))
    return clock


@pytest.fixture
def agent_clock(fault_clock):
    """Import it (with ``fault_clock``) to run the agent on the fault clock too."""
    return fault_clock


@pytest.fixture
def conway():
    """The Conway stand-in with a balance of 1,234 cents."""
    from standins.conway_api import ConwayApi

    with ConwayApi(balance_cents=1234) as api:
        yield api


@pytest.fixture
def model():
    """The scripted llama.cpp stand-in (modules that put a fault proxy in front override it)."""
    with OpenAIServer(mode="llamacpp") as server:
        yield server


def integrity(db_path: Path) -> str:
    con = sqlite3.connect(db_path, timeout=30)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


def last_error(db) -> str:
    """The message of KV ``last_error`` (what ``status`` shows), or ""."""
    import orjson

    from automaton_min.store.kv import get_value

    raw = get_value(db, "last_error")
    return orjson.loads(raw)["message"] if raw else ""

"""What a heartbeat task receives and returns: a task is a plain function ``run(ctx: TaskContext) -> TaskResult``, run
on a worker with its own database connection; it never calls the model and asks for a wake (``TaskResult.wake``)
only when the agent has work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from automaton_min.errors import RuntimeFailure
from automaton_min.heartbeat.parts import describe
from automaton_min.observe.clock_trust import ClockTrust

if TYPE_CHECKING:
    from automaton_min.config import Config
    from automaton_min.conway.client import ConwayClient
    from automaton_min.home import Home
    from automaton_min.store.db import Database


class ServiceUnreachable(RuntimeFailure):
    """A task's remote part (``heartbeat/parts.py``) gave no answer: not the task's failure. The scheduler reports the
    part's changes of state, retries after its back-off, and leaves it out of the failure rate alerts watch."""

    def __init__(self, part: str, detail: str) -> None:
        super().__init__(f"{describe(part)} did not answer: {detail}")
        self.part = part


@dataclass(frozen=True)
class TaskResult:
    """What a task did: a short summary for ``heartbeat_history``/logs, and a wake reason when the agent must act.

    The scheduler stores the one wake event with source ``wake_payload["source"]`` when given (``social`` for
    messages the loop reads from the inbox), else ``heartbeat``."""

    summary: str = ""
    wake: str | None = None
    wake_payload: dict[str, Any] = field(default_factory=dict)
    reached: tuple[str, ...] = ()  # the remote parts that answered this run (``heartbeat/parts.py`` names)


@dataclass
class TaskContext:
    """The services a task may use. Optional ones are None when this agent has no such service."""

    db: "Database"
    config: "Config"
    home: "Home"
    now: Callable[[], int]
    tier: str  # the survival tier as last known (``tiers.py`` names), "normal" when credits do not apply
    wallet_address: str
    conway: "ConwayClient | None" = None
    relay: Any = None  # social.relay.RelayClient when socialRelayUrl is set
    metrics: Any = None  # observe.metrics.Metrics in the daemon
    stop: Any = None  # threading.Event set when the daemon stops: long tasks check it and return early
    usdc_balance: Callable[[], int] | None = None  # the wallet's USDC (atomic units), read from the chain
    topup: Callable[[int, int], Any] | None = None  # (credits_cents, usdc_atomic) -> conway.topup.bootstrap_topup
    clock_trust: ClockTrust = field(default_factory=ClockTrust)  # asked before any signed time is judged


TaskFunction = Callable[[TaskContext], TaskResult]

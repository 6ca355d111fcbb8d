"""The collaborators the built-in tools use, as one typed object (``ToolServices``), and protocols for those that
are not plain classes of this package.

The runtime builds it once; each turn gets a copy with its ``LoopControl``. ``loop_control.need`` fails with a
message naming a missing service (the sandbox in a unit test, ``conway`` without an API key, ``relay`` without one).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from automaton_min.chain.usdc import Network
    from automaton_min.conway.client import ConwayClient
    from automaton_min.conway.sandbox import Sandbox
    from automaton_min.home import Home
    from automaton_min.inference.registry import ModelRegistry
    from automaton_min.inference.router import Router
    from automaton_min.store.disk_reserve import DiskReserve
    from automaton_min.treasury.payer import Payer
    from automaton_min.update.baked import Build


@runtime_checkable
class LoopControl(Protocol):
    """Per-turn state a tool may change, read by the loop after the turn's calls. ``request_sleep``: after this turn
    (the last wins); ``low_compute``: the cheaper model; ``extra``: per-turn counters (credit transfers)."""

    low_compute: bool
    distress: bool
    extra: dict[str, Any]
    tier: str

    def request_sleep(self, seconds: int, reason: str) -> None: ...


@runtime_checkable
class Relay(Protocol):
    """The social relay (``social.relay.RelayClient``): sends a signed message; returns ``{"id": ...}``, or
    ``{"id": ..., "earlier": SentRecord}`` when this turn and call already sent it."""

    def send(self, to: str, content: str, reply_to: str | None = None, *, db: Any = None, turn_id: str | None = None,
             call_index: int | None = None) -> dict[str, Any]: ...


@runtime_checkable
class HeartbeatControl(Protocol):
    """The heartbeat scheduler's editable schedule; returns a one-line description of the change."""

    def modify(self, action: str, name: str, *, schedule: str | None = None, task: str | None = None,
               enabled: bool | None = None) -> str: ...


class Balances(Protocol):
    """The agent's balances as the tools report them."""

    def credits_cents(self) -> int | None:
        """The credit balance the loop knows (cached); ``None`` when unknown."""
        ...

    def usdc_atomic(self) -> int:
        """The wallet's USDC in atomic units, read now; raises when the node does not answer."""
        ...


@dataclass(frozen=True)
class ToolServices:
    """What the tools may use; ``None`` where this run has no such service."""

    sandbox: "Sandbox | None" = None  # local (confined) or remote
    conway: "ConwayClient | None" = None  # None in local mode without an API key
    home: "Home | None" = None
    wallet_address: str | None = None
    balances: Balances | None = None
    payer: "Payer | None" = None
    registry: "ModelRegistry | None" = None
    relay: Relay | None = None
    disk: "DiskReserve | None" = None  # local mode: the home's free space, looked at after each command
    heartbeat: HeartbeatControl | None = None
    network: "Network | None" = None  # the chain payments use (default Base)
    release: "Build | None" = None  # the release this program came from: its children run the same signed release
    router: "Router | None" = None  # for the planner (goals/planner.py): a plan made by the planning model
    loop: LoopControl | None = None  # new every turn
    off: "dict[str, str] | None" = None  # service -> why this run has none (a local-only agent's relay), for need()

    def for_turn(self, loop: LoopControl) -> "ToolServices":
        """A copy carrying this turn's loop control."""
        return replace(self, loop=loop)

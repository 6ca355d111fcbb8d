"""What the built-in tools expect from the services the loop puts in ``ToolContext.services``.

The loop fills ``services`` with these names (a tool that needs one that is missing
fails with a message naming it, through ``need``):

=====================  ==================================================================
``sandbox``            ``conway.sandbox.Sandbox`` (local or remote)
``conway``             ``ConwayClient``, or ``None`` in local mode without an API key
``home``               ``home.Home``
``wallet_address``     the agent's address (str)
``usdc_balance``       ``() -> int``: the wallet's USDC in atomic units; may raise
``payer``              ``treasury.payer.Payer``
``registry``           ``inference.registry.ModelRegistry``
``loop``               a ``LoopControl`` (``agent.loop.LoopState`` is one), new every turn
``transfers_this_turn``  ``int``: credit transfers already made this turn
``credits_cents``      ``() -> int | None``: the (cached) credit balance, ``None`` if unknown
``relay``              optional: a ``Relay`` (the social relay, a later issue)
``heartbeat``          optional: a ``HeartbeatControl`` (the heartbeat scheduler, a later issue)
``network``            optional: the ``chain.usdc.Network`` payments use (default Base)
=====================  ==================================================================
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Callable, Protocol, runtime_checkable

from automaton_min.agent.tools.base import ToolContext, ToolFailure
from automaton_min.errors import AutomatonError

# KV keys the tools write.
LOW_COMPUTE_KEY = "low_compute_mode"  # JSON {"since", "reason"}: the agent asked for low-compute mode
TRANSFERS_KEY = "transfers_this_turn"  # in LoopControl.extra: transfers the tools made this turn


@runtime_checkable
class LoopControl(Protocol):
    """Per-turn state a tool may change; the loop reads it after the tool calls of the turn.

    ``request_sleep``: sleep for ``seconds`` once this turn ends (the last request wins).
    ``low_compute``: run on the cheaper model with fewer tokens.
    ``distress``: the agent has raised a distress signal.
    ``extra``: a scratch dict for per-turn counters (credit transfers made by the tools).
    """

    low_compute: bool
    distress: bool
    extra: dict[str, Any]

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


HINTS = {
    "sandbox": "no sandbox is attached to this run",
    "conway": "the Conway API is not configured (local mode without an API key); the creator can run: automaton-min provision",
    "home": "the home directory is not known to this run",
    "wallet_address": "the wallet address is not known to this run",
    "usdc_balance": "no Base RPC reader is configured (rpcUrl)",
    "payer": "no x402 payer is configured (it needs the wallet)",
    "registry": "the model registry is not available",
    "loop": "this tool only works inside the agent loop",
    "relay": "the social relay is not configured yet",
    "heartbeat": "the heartbeat scheduler is not configured yet",
}


def object_schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """A tool's parameters: an object with these properties and no others."""
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def need(ctx: ToolContext, name: str) -> Any:
    """The service ``name``, or a ``ToolFailure`` that says which one is missing and why."""
    value = ctx.services.get(name)
    if value is None:
        raise ToolFailure(f"{HINTS.get(name, 'it is not available in this run')} (service '{name}' is missing)")
    return value


def credits_now(ctx: ToolContext) -> int | None:
    """The credit balance the loop knows (cached), or ``None`` when it is unknown."""
    reader = ctx.services.get("credits_cents")
    if reader is None:
        return None
    try:
        value = reader() if callable(reader) else reader
    except (AutomatonError, OSError):  # a failing reader means "unknown", never zero
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def setting(ctx: ToolContext, key: str, default: Any = None) -> Any:
    """A configuration value (``ctx.config`` is a ``Config`` or a plain mapping)."""
    config = ctx.config
    if config is None:
        return default
    value = config.get(key)
    return default if value is None else value


def change_config(ctx: ToolContext, apply: Callable[[MutableMapping[str, Any]], None]) -> None:
    """Apply ``apply`` to ``automaton.json`` (saved atomically, validated first), then to the live configuration.

    The file is re-read from the home, so only what it holds (plus the change) is
    written: never the process-only values (environment overrides, the provisioned
    API key). The live configuration (``ctx.config``: a ``Config`` or the plain dict
    the loop and the router share) changes only once the file is saved.
    """
    from automaton_min.config import Config, load_config, save_config

    home = need(ctx, "home")
    try:
        on_disk = load_config(home)
        apply(on_disk.stored)
        save_config(home, on_disk)
    except (AutomatonError, OSError) as exc:
        raise ToolFailure(f"the configuration was not changed: {exc}") from None
    live = ctx.config
    layers = [live.stored, live.values] if isinstance(live, Config) else [live] if isinstance(live, MutableMapping) else []
    for layer in layers:
        apply(layer)

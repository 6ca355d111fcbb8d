"""Helpers every tool family uses: ``need`` (a service from ``ToolContext.services``, a ``ToolServices``, or a
failure naming the missing one), the balances the loop knows, settings and configuration changes, schemas.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Callable

from automaton_min.agent.tools.base import Tool, ToolContext, ToolFailure, ToolHandler, ToolSpec
from automaton_min.errors import AutomatonError

# KV keys the tools write.
LOW_COMPUTE_KEY = "low_compute_mode"  # JSON {"since", "reason"}: the agent asked for low-compute mode
TRANSFERS_KEY = "transfers_this_turn"  # in LoopControl.extra: transfers the tools made this turn


HINTS = {
    "sandbox": "no sandbox is attached to this run",
    "conway": "the Conway API is not configured (local mode without an API key); "
              "the creator can run: automaton-min provision",
    "home": "the home directory is not known to this run",
    "wallet_address": "the wallet address is not known to this run",
    "balances": "no balance reader is attached to this run (USDC is read through rpcUrl)",
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


def tool_family(category: str) -> Callable[..., Tool]:
    """A maker of one family's tools: ``make(name, description, properties, required, run, risk=, mutating=,
    status_check=)`` with the parameters as ``object_schema``."""
    def make(name: str, description: str, properties: dict[str, Any], required: list[str], run: ToolHandler, *,
             risk: str = "safe", mutating: bool = False, status_check: bool = False) -> Tool:
        return Tool(ToolSpec(name, description, object_schema(properties, required), category, risk=risk,
                             mutating=mutating, status_check=status_check), run)
    return make


def need(ctx: ToolContext, name: str) -> Any:
    """The service ``name`` (a field of ``ToolServices``), or a ``ToolFailure`` that says which one is missing and
    why."""
    value = getattr(ctx.services, name)
    if value is None:
        why = (getattr(ctx.services, "off", None) or {}).get(name) or HINTS.get(name, "it is not available in this run")
        raise ToolFailure(f"{why} (service '{name}' is missing)")
    return value


def credits_now(ctx: ToolContext) -> int | None:
    """The credit balance the loop knows (cached), or ``None`` when it is unknown."""
    balances = ctx.services.balances
    if balances is None:
        return None
    try:
        value = balances.credits_cents()
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
    """Apply ``apply`` to ``automaton.json`` (validated, saved atomically), then to the live configuration.

    The file is re-read from the home, so only what it holds plus the change is written, never the process-only values
    (environment overrides, the provisioned API key). The live configuration changes only once the file is saved.
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
    layers = ([live.stored, live.values] if isinstance(live, Config)
              else [live] if isinstance(live, MutableMapping) else [])
    for layer in layers:
        apply(layer)

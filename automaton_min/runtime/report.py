"""What a running agent tells the person watching it: a start banner and one line per tool call."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import orjson

from automaton_min.config import Config
from automaton_min.errors import AutomatonError
from automaton_min.log import get_logger
from automaton_min.store.turns import StoredToolCall

if TYPE_CHECKING:
    from automaton_min.heartbeat.parts import PartStates

log = get_logger("run")

ARGUMENTS_CHARS = 80
ERROR_CHARS = 120


def banner_fields(agent: Any, config: Config) -> dict[str, Any]:
    """Name, address, model, provider and confinement of an assembled agent."""
    loop = agent.loop
    return {
        "agent": loop.identity.name,
        "address": loop.identity.address,
        "model": config.get("inferenceModel"),
        "provider": _provider(loop.router),
        "confinement": getattr(agent, "confinement", "unknown"),
        "commandLimits": getattr(agent.sandbox, "limits", lambda: "none (commands run remotely or unconfined)")(),
    }


def _provider(router: Any) -> str:
    from automaton_min.inference.providers import Providers
    from automaton_min.inference.router import BudgetDenied

    route = router.plan("normal")
    if isinstance(route, BudgetDenied):
        return f"none ({route.message})"
    try:
        return Providers(router.config).kind_for(route.model)
    except AutomatonError as exc:
        return f"none ({exc})"


def log_banner(agent: Any, config: Config, parts: "PartStates") -> None:
    """The start banner, with the remote parts that are off or do not answer."""
    log.info("automaton-min started", extra={**banner_fields(agent, config), "parts": parts.banner()})


def short(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def log_tool_call(call: StoredToolCall, scrub: Callable[[str], str] | None = None) -> None:
    """One line: the tool, its arguments (cut short), ok or the error, and how long it took.

    ``scrub`` (the key guard's) cleans the arguments first: a model that somehow holds the key writes it into a
    call's arguments in any spelling, and the log's own scrubber knows only the key's exact forms."""
    text = orjson.dumps(call.arguments).decode()
    arguments = short(scrub(text) if scrub else text, ARGUMENTS_CHARS)
    outcome = "ok" if call.error is None else "error: " + short(call.error, ERROR_CHARS)
    log.info(f"tool {call.name} {outcome} ({call.duration_ms} ms)",
             extra={"tool": call.name, "arguments": arguments, "ok": call.error is None,
                    "durationMs": call.duration_ms})

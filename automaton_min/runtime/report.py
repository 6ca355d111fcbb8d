"""What a running agent tells the person watching it at start: the banner."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from automaton_min.config import Config
from automaton_min.errors import AutomatonError
from automaton_min.log import get_logger

if TYPE_CHECKING:
    from automaton_min.heartbeat.parts import PartStates

log = get_logger("run")

def banner_fields(agent: Any, config: Config) -> dict[str, Any]:
    """Name, version, address, model, provider and confinement of an assembled agent."""
    from automaton_min import __version__

    loop = agent.loop
    return {
        "agent": loop.identity.name,
        "version": __version__,
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

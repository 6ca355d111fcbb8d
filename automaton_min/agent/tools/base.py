"""The contract every tool, the registry and the policy engine share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from automaton_min.agent.tools.services import ToolServices

Risk = Literal["safe", "caution", "dangerous", "forbidden"]

# Who is asking for a tool call, from where the turn's input came: "creator" only for a message signed by the
# creator's address; "agent" for the agent's own turns (wake-up, continuation, its notices); "external" otherwise.
Authority = Literal["creator", "agent", "external"]
AUTHORITIES: tuple[str, ...] = ("creator", "agent", "external")


@dataclass(frozen=True)
class ToolSpec:
    """What the model sees of a tool, plus what the loop and the policy engine need to know."""

    name: str
    description: str
    parameters: dict[str, Any]
    category: str
    risk: Risk = "safe"
    mutating: bool = False
    status_check: bool = False


@dataclass
class ToolContext:
    """What a tool may use while it runs (never the runtime itself); ``services``: ``tools.services.ToolServices``."""

    db: Any
    config: Any
    now: Callable[[], int]
    turn_id: str | None = None
    authority: Authority = "agent"
    services: ToolServices = field(default_factory=ToolServices)
    call_index: int | None = None  # the call's position in its turn: with turn_id, what a replayed turn repeats


ToolHandler = Callable[[ToolContext, dict[str, Any]], str]


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    run: ToolHandler


class ToolFailure(Exception):
    """Raised by a tool for an expected failure; its message becomes the error result the model sees."""

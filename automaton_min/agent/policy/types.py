"""What the policy engine and its rule modules share: the request, the verdict, the decision, the rule record."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from automaton_min.agent.tools.base import Authority, ToolSpec
from automaton_min.clock import Clock

Action = Literal["allow", "deny", "quarantine"]
Verdict = tuple[Literal["deny", "quarantine"], str, str]  # (action, reason code, message)

ALLOWED = "ALLOWED"
DB_UNAVAILABLE = "DB_UNAVAILABLE"
RULE_ERROR = "RULE_ERROR"
VALIDATION_FAILED = "VALIDATION_FAILED"


def deny(code: str, message: str) -> Verdict:
    return ("deny", code, message)


def quarantine(code: str, message: str) -> Verdict:
    return ("quarantine", code, message)


@dataclass(frozen=True)
class PolicyRequest:
    """One tool call as the policy sees it; ``calls_this_turn`` names the calls made before it in the turn."""

    spec: ToolSpec
    arguments: Mapping[str, Any]
    authority: Authority
    turn_id: str | None
    calls_this_turn: tuple[str, ...] = ()

    @property
    def tool(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class PolicyDecision:
    action: Action
    reason_code: str
    message: str
    risk: str
    rules_evaluated: list[str] = field(default_factory=list)
    rules_triggered: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        """Only ``allow`` lets the call run; a quarantine waits for the creator."""
        return self.action == "allow"

    @property
    def reason(self) -> str:
        """``"CODE: message"``, as stored in ``policy_decisions.reason``."""
        return f"{self.reason_code}: {self.message}"


@dataclass(frozen=True)
class Applies:
    """What a rule looks at: tool names, categories, risk levels, or every tool."""

    tools: frozenset[str] = frozenset()
    categories: frozenset[str] = frozenset()
    risks: frozenset[str] = frozenset()
    every: bool = False

    def matches(self, spec: ToolSpec) -> bool:
        return self.every or spec.name in self.tools or spec.category in self.categories or spec.risk in self.risks


def tools(*names: str) -> Applies:
    return Applies(tools=frozenset(names))


def every_tool() -> Applies:
    return Applies(every=True)


@dataclass(frozen=True)
class PolicyEnv:
    """What rules may consult: the database, the configuration, the home, the workspace and the clock.

    ``commands_confined``: the kernel confines ``exec`` away from the agent's home (``rules_command.py``)."""

    db: Any
    config: Any
    home: Path
    workspace: Path
    now: Clock
    balance_cents: Callable[[], "int | None"] | None = None
    commands_confined: bool = False

    def setting(self, key: str, default: Any = None) -> Any:
        """A configuration value (``Config`` or a plain mapping; ``None`` config gives the default)."""
        if self.config is None:
            return default
        value = self.config.get(key, default)
        return default if value is None else value


Check = Callable[[PolicyRequest, PolicyEnv], "Verdict | None"]


@dataclass(frozen=True)
class Rule:
    id: str
    priority: int
    applies: Applies
    check: Check
    description: str = ""

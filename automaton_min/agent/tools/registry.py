"""The tool registry: the tools the model may call, and the one path by which a call runs.

``execute`` never raises for what a tool or the model did: an unknown tool, arguments that do not fit the schema, a
policy refusal, a ``ToolFailure`` or any exception is an error result (capped at ``MAX_RESULT_CHARS``, as results are).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from automaton_min.agent.tools.base import Tool, ToolContext, ToolFailure, ToolSpec
from automaton_min.agent.tools.validate import validate
from automaton_min.log import get_logger

MAX_RESULT_CHARS = 10_000

log = get_logger(__name__)

# Called before a tool runs: None lets it run; a message refuses it (the policy engine's answer).
Authorize = Callable[[ToolSpec, dict[str, Any]], "str | None"]


@dataclass(frozen=True)
class ToolOutcome:
    call_id: str
    name: str
    arguments: dict[str, Any]
    result: str
    error: str | None
    duration_ms: int

    @property
    def ok(self) -> bool:
        return self.error is None


def cap(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[truncated: {len(text) - limit} more characters]"


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.spec.name in self._tools:
                raise ValueError(f"two tools are named {tool.spec.name!r}")
            if tool.spec.parameters.get("type") != "object":
                raise ValueError(f"{tool.spec.name}: parameters must be an object schema")
            self._tools[tool.spec.name] = tool

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def specs(self) -> list[ToolSpec]:
        return [tool.spec for tool in self._tools.values()]

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def execute(self, ctx: ToolContext, call_id: str, name: str, arguments: dict[str, Any], *,
                argument_error: str | None = None, authorize: Authorize | None = None,
                max_result_chars: int = MAX_RESULT_CHARS,
                monotonic: Callable[[], float] = time.monotonic) -> ToolOutcome:
        """Validate, authorize and run one tool call; every failure is a result, never an exception."""
        started = monotonic()

        def done(result: str, error: str | None = None) -> ToolOutcome:
            return ToolOutcome(call_id, name, arguments, cap(result, max_result_chars),
                               cap(error, max_result_chars) if error is not None else None,
                               int((monotonic() - started) * 1000))

        tool = self._tools.get(name)
        if tool is None:
            return done("", f"unknown tool {name!r}; available: {', '.join(sorted(self._tools))}")
        if argument_error:
            return done("", f"the arguments were not a JSON object ({argument_error}); "
                            f"call {name} again with valid JSON")
        problems = validate(arguments, tool.spec.parameters)
        if problems:
            return done("", "invalid arguments: " + "; ".join(problems[:5]))
        if authorize is not None:
            refusal = authorize(tool.spec, arguments)
            if refusal:
                return done("", f"blocked by policy: {refusal}")
        try:
            return done(tool.run(ctx, arguments))
        except ToolFailure as exc:
            return done("", str(exc) or type(exc).__name__)
        except Exception as exc:  # the boundary of one tool call: a bug in a tool must not end the turn
            log.exception("tool crashed", extra={"tool": name})
            return done("", f"{name} failed unexpectedly: {type(exc).__name__}: {exc}")

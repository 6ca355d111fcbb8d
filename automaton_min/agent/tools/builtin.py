"""The built-in tools, named as in the reference runtime, and the sets the loop needs.

Each tool is wrapped so that no registered secret (``log.register_secret``) leaves it in a result or error, even when
a command prints one; this is not the injection defence, which the loop applies once, after the call.
``STATUS_CHECK_TOOLS`` (the reference's ``IDLE_ONLY_TOOLS``) and ``MUTATING_TOOLS`` come from the specs.
"""

from __future__ import annotations

from typing import Any

from automaton_min.agent.tools import children, goals, memory_tools, models, money, self_tools, survival, vm
from automaton_min.agent.tools.base import Tool, ToolContext, ToolFailure
from automaton_min.log import scrub


def _scrubbed(tool: Tool) -> Tool:
    run = tool.run

    def guarded(ctx: ToolContext, args: dict[str, Any]) -> str:
        try:
            return scrub(run(ctx, args))
        except ToolFailure as exc:
            raise ToolFailure(scrub(str(exc))) from None

    return Tool(tool.spec, guarded)


_ALL: tuple[Tool, ...] = (*vm.TOOLS, *money.TOOLS, *survival.TOOLS, *models.TOOLS, *self_tools.TOOLS,
                          *memory_tools.TOOLS, *children.TOOLS, *goals.TOOLS)


def builtin_tools() -> list[Tool]:
    """Every built-in tool, ready for ``ToolRegistry``."""
    return [_scrubbed(tool) for tool in _ALL]


STATUS_CHECK_TOOLS: frozenset[str] = frozenset(t.spec.name for t in _ALL if t.spec.status_check)
IDLE_ONLY_TOOLS = STATUS_CHECK_TOOLS  # the reference's name
MUTATING_TOOLS: frozenset[str] = frozenset(t.spec.name for t in _ALL if t.spec.mutating)

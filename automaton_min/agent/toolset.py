"""The tools a turn offers the model: all of them, or in compact mode a fixed subset per tier with short texts (README:
Memory, compact mode). Every text is derived deterministically, so the list stays byte-identical from turn to turn.
A tool outside the subset still runs if the model names it (the policy decides); it is only not advertised.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from automaton_min.agent.tools.base import ToolSpec
from automaton_min.config import CONTEXT_MODES
from automaton_min.inference.types import ToolSchema

COMPACT_WINDOW = 8_192
BRIEF_CHARS = 100
DANGER = " [dangerous: spends money or changes who you are]"
LEAN_KEYS = frozenset({"type", "required", "enum"})
# Parameters compact mode leaves out: a background job needs stop_job, which a small window does not offer; a goal
# set without its tasks is planned by the router's planning model.
COMPACT_HIDDEN = {"exec": ("background",), "create_goal": ("strategy", "tasks")}

_CORE = ("exec", "read_file", "write_file", "sleep", "system_synopsis", "check_credits", "check_usdc_balance",
         "send_message", "remember_fact", "recall_facts", "create_goal", "complete_task")
COMPACT_TOOLS: dict[str, tuple[str, ...]] = {
    "high": _CORE + ("topup_credits", "x402_fetch", "save_procedure", "recall_procedure"),
    "normal": _CORE + ("topup_credits", "x402_fetch", "save_procedure", "recall_procedure"),
    "low_compute": _CORE + ("topup_credits", "enter_low_compute", "distress_signal"),
    "critical": _CORE + ("topup_credits", "distress_signal"),
    "dead": ("sleep", "check_credits", "distress_signal"),
}

_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def is_compact(config: Mapping[str, Any] | Any, window: int) -> bool:
    """Compact mode: ``contextMode`` says so, or (``auto``, the default) the window is 8k tokens or less."""
    mode = config.get("contextMode") or CONTEXT_MODES[0]
    return mode == "compact" or (mode == "auto" and window <= COMPACT_WINDOW)


def brief(description: str) -> str:
    """The first sentence of a description, at most ``BRIEF_CHARS`` characters."""
    first = _SENTENCE_END.split(description.strip(), maxsplit=1)[0]
    return first if len(first) <= BRIEF_CHARS else first[: BRIEF_CHARS - 3].rstrip() + "..."


def _lean(schema: Any) -> Any:
    """A JSON schema cut to what a model needs to call the tool: types, properties, required fields, enums and
    item types (descriptions and value bounds go; the registry still validates against the full schema)."""
    if not isinstance(schema, dict):
        return schema
    lean: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            lean[key] = {name: _lean(sub) for name, sub in value.items()}
        elif key == "items":
            lean[key] = _lean(value)
        elif key in LEAN_KEYS:
            lean[key] = value
    return lean


def _schema(spec: ToolSpec, compact: bool) -> ToolSchema:
    dangerous = spec.risk == "dangerous"
    if compact:
        lean = _lean(spec.parameters)
        for name in COMPACT_HIDDEN.get(spec.name, ()):
            lean.get("properties", {}).pop(name, None)
        return ToolSchema(spec.name, brief(spec.description) + (" [dangerous]" if dangerous else ""), lean)
    return ToolSchema(spec.name, spec.description + (DANGER if dangerous else ""), spec.parameters)


def offered_tools(specs: list[ToolSpec], tier: str, *, compact: bool) -> tuple[ToolSchema, ...]:
    """The schemas to send: every tool, or the tier's compact subset (in registry order)."""
    if not compact:
        return tuple(_schema(spec, False) for spec in specs)
    wanted = set(COMPACT_TOOLS.get(tier, COMPACT_TOOLS["critical"]))
    return tuple(_schema(spec, True) for spec in specs if spec.name in wanted)

"""How a turn asks the model to act (README: Local model, no money): one request with the tools (``compact`` in a
window of 8k tokens or less, ``full`` above), or two short steps (``stepwise``: ``agent/stepwise.py``).

With ``actionMode: auto`` a compact window starts compact, and the model's first answers decide: a valid tool call
keeps it compact; no valid call in two turns in a row (turns that answered no message) puts it stepwise. Either is
kept per model id (KV ``model_action_modes``, as the window is) so a restart does not learn it again, and a new model
learns afresh. A window too small for the compact prompt and tools is stepwise at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from automaton_min.agent.toolset import is_compact
from automaton_min.clock import Clock, to_iso
from automaton_min.config import ACTION_MODES
from automaton_min.store.kv import get_value, json_object, set_json

if TYPE_CHECKING:
    from automaton_min.store.db import Database

LEARNT_KEY = "model_action_modes"  # model id -> {"mode", "why", "at"}
LAST_KEY = "action_mode"  # the mode the last turn used and why, for status
TEXT_ANSWERS_TO_STEPWISE = 2
FIT_SHARE = 2 / 3  # the compact prompt and tools may take this much of the prompt's capacity, at most (not at 4k)


@dataclass(frozen=True)
class ActionMode:
    """``stepwise``, ``compact`` or ``full``; why, as a person reads it; ``learning``: the model's answers may
    still change it."""

    name: str
    why: str
    learning: bool = False

    @property
    def stepwise(self) -> bool:
        return self.name == "stepwise"


@dataclass
class ActionModes:
    """Chooses each turn's mode and learns it from the model's answers; one per running agent."""

    db: "Database"
    config: Mapping[str, Any] | Any
    now: Clock
    _text_answers: dict[str, int] = field(default_factory=dict)
    _last: tuple[str, int, str] | None = None

    def choose(self, model_id: str, window: int, *, fixed_tokens: int, capacity: int) -> ActionMode:
        """The mode for a turn of ``model_id`` with a ``window``-token window, whose compact prompt and tools take
        ``fixed_tokens`` of the prompt's ``capacity``; the mode used is recorded for ``status`` when it changes."""
        mode = self._decide(model_id, window, fixed_tokens, capacity)
        if self._last != (model_id, window, mode.name):
            self._last = (model_id, window, mode.name)
            now_ms = self.now()
            set_json(self.db, LAST_KEY, {"model": model_id, "window": window, "mode": mode.name, "why": mode.why,
                                         "at": to_iso(now_ms)}, now_ms)
        return mode

    def _decide(self, model_id: str, window: int, fixed_tokens: int, capacity: int) -> ActionMode:
        setting = self.config.get("actionMode") or ACTION_MODES[0]
        compact = is_compact(self.config, window)
        size = "compact" if compact else "full"
        if setting == "stepwise":
            return ActionMode("stepwise", "actionMode is stepwise")
        if setting == "direct":
            return ActionMode(size, f"actionMode is direct; the {window:,}-token window makes it {size}")
        if not compact:
            return ActionMode("full", f"the {window:,}-token window is over the compact mode's 8,192")
        learnt = json_object(get_value(self.db, LEARNT_KEY)).get(model_id)
        if isinstance(learnt, dict) and learnt.get("mode") in ("stepwise", "compact"):
            return ActionMode(learnt["mode"], f"learnt {learnt.get('at', '?')}: {learnt.get('why', '')}")
        if fixed_tokens > capacity * FIT_SHARE:
            return ActionMode("stepwise", f"the compact prompt and tools (about {fixed_tokens:,} tokens) leave too "
                                          f"little of the {window:,}-token window")
        return ActionMode("compact", f"the {window:,}-token window holds the compact tools; the model's first "
                                     "answers decide whether it stays so", learning=True)

    def after_answer(self, model_id: str, mode: ActionMode, *, called_a_tool: bool, answered_a_message: bool) -> None:
        """Learn from a direct turn's answer while ``mode`` is learning. A text answer to a message may be a reply,
        not a failure to act: it counts for nothing (so nobody's small talk puts a capable model stepwise)."""
        if not mode.learning or (answered_a_message and not called_a_tool):
            return
        if called_a_tool:
            self._learn(model_id, "compact", "it made a valid tool call in one request")
            return
        misses = self._text_answers[model_id] = self._text_answers.get(model_id, 0) + 1
        if misses >= TEXT_ANSWERS_TO_STEPWISE:
            self._learn(model_id, "stepwise", f"it made no valid tool call in {misses} turns in a row")

    def _learn(self, model_id: str, mode: str, why: str) -> None:
        self._text_answers.pop(model_id, None)
        now_ms = self.now()
        known = json_object(get_value(self.db, LEARNT_KEY))
        set_json(self.db, LEARNT_KEY, {**known, model_id: {"mode": mode, "why": why, "at": to_iso(now_ms)}}, now_ms)


def last_mode(db: "Database") -> dict[str, Any] | None:
    """The mode the last turn used and why (``status``), or None before the first turn."""
    value = json_object(get_value(db, LAST_KEY))
    return value if value.get("mode") else None


def expected_mode(db: "Database", config: Mapping[str, Any] | Any, model_id: str, window: int) -> ActionMode:
    """The mode ``doctor`` names: the last turn's for this model and window, else what a first turn would choose
    (the compact prompt's fit is known only then)."""
    last = last_mode(db)
    if last is not None and last.get("model") == model_id and last.get("window") == window:
        return ActionMode(last["mode"], f"{last.get('why', '')}; as the last turn, at {last.get('at', '?')}")
    return ActionModes(db, config, lambda: 0)._decide(model_id, window, 0, window)

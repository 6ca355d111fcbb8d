"""A model's context window and where it came from (the sources in order: README, Clients, model registry). A refusal
in this run lowers whichever source applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from automaton_min.clock import Clock, to_iso
from automaton_min.store.kv import get_value, json_object, set_json

if TYPE_CHECKING:
    from automaton_min.store.db import Database

LEARNED_KEY = "model_windows"
CONFIGURED = "modelStrategy.contextWindow"
REGISTRY = "the model registry"
ASSUMED = "a default (the server does not say it; learnt from its first refusal of a longer prompt)"
REFUSED = "the server's refusal of a longer prompt (this run)"


@dataclass(frozen=True)
class Window:
    """A window in tokens and where it came from, as a person reads it."""

    tokens: int
    source: str


class LearnedWindows:
    """The windows servers named when they refused a prompt, per model id, kept across runs."""

    def __init__(self, db: "Database", now: Clock) -> None:
        self.db = db
        self.now = now

    def get(self, model_id: str) -> Window | None:
        entry = json_object(get_value(self.db, LEARNED_KEY)).get(model_id)
        if not isinstance(entry, dict) or not isinstance(entry.get("tokens"), int) or entry["tokens"] <= 0:
            return None
        return Window(entry["tokens"], f"the server's refusal of a longer prompt (at {entry.get('at', '?')})")

    def record(self, model_id: str, tokens: int) -> None:
        known = json_object(get_value(self.db, LEARNED_KEY))
        now_ms = self.now()
        set_json(self.db, LEARNED_KEY, {**known, model_id: {"tokens": tokens, "at": to_iso(now_ms)}}, now_ms)

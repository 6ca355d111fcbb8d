"""The open turn, kept in KV ``open_turn`` until its commit, so a turn a crash cut off replays under its id (README:
Reliability): the turn that claims all its inbox messages again (they return at start, oldest first), or, when it had
no inbox input, the first turn after the restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from automaton_min.ids import new_ulid
from automaton_min.store.kv import delete_value, get_value, json_object, set_json

if TYPE_CHECKING:
    from automaton_min.store.db import Database

OPEN_TURN_KEY = "open_turn"


class OpenTurns:
    """Hands out turn ids: a fresh one, or the cut-off turn's id to the turn that replays it."""

    def __init__(self, db: "Database") -> None:
        self.db = db
        self._cut_off = _read(db)  # read once: the record left by the process before this one

    def start(self, claimed: list[str], now_ms: int) -> str:
        """The id of the turn starting now with the ``claimed`` inbox messages; recorded as open."""
        turn_id = new_ulid(now_ms)
        if self._cut_off is not None:
            cut_off_id, inbox = self._cut_off
            if not inbox or (claimed and set(inbox) <= set(claimed)):
                turn_id, self._cut_off = cut_off_id, None
            elif claimed:  # another batch: the cut-off turn's messages went elsewhere (failed, processed)
                self._cut_off = None
        set_json(self.db, OPEN_TURN_KEY, {"id": turn_id, "inbox": claimed}, now_ms)
        return turn_id

    def failed(self, turn_id: str, claimed: list[str]) -> None:
        """A turn failed without committing: the turn that retries its messages replays it (same process)."""
        self._cut_off = (turn_id, list(claimed))

    def close(self) -> None:
        """Inside the turn's commit transaction: no turn is open any more."""
        delete_value(self.db, OPEN_TURN_KEY)


def _read(db: "Database") -> tuple[str, list[str]] | None:
    record = json_object(get_value(db, OPEN_TURN_KEY))
    turn_id, inbox = record.get("id"), record.get("inbox")
    if not isinstance(turn_id, str) or not turn_id or not isinstance(inbox, list):
        return None
    return turn_id, [m for m in inbox if isinstance(m, str)]

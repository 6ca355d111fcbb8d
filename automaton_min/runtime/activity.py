"""What the agent did, read back from ``state.db``: turns with their tool calls and how each ended, and the turns
that failed (``failed_turns``) among them in time order, for ``automaton-min logs``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from automaton_min.store.db import Database

# A position in the history: the sort key of the last entry shown. Turns sort by (timestamp, id); a failed turn
# sorts as the turn it was (its start time and turn id), before a retry that replays it under the same id in the
# same millisecond, and its own id parts failures of one turn. Timestamps are fixed-width ISO text: text order
# is time order.
Cursor = tuple[str, str, int, str]

_TURN_COLUMNS = "id, timestamp, state, input_source, thinking, cost_cents, {ending}, id"
_FAILED_COLUMNS = "id, timestamp, state, input_source, '', 0, ending, turn_id"
# (table, whether its rows are failures, its sort key in SQL, newest first)
_TURNS = ("turns", False, "timestamp, id, 1, id", "timestamp DESC, id DESC")
_FAILED = ("failed_turns", True, "timestamp, turn_id, 0, id", "timestamp DESC, turn_id DESC, id DESC")
RESULT_HEAD = 400  # characters of a tool result read back: its first line is what is shown


def first_line(text: str | None) -> str:
    """The first non-empty line of a tool result, or ``""``."""
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def _sources(db: "Database") -> list[tuple[str, str, bool, str, str]]:
    """Where turns are read from. A read-only reader does not migrate: a database from before endings were
    recorded (migration ``turn_endings``) has neither ``turns.ending`` nor ``failed_turns``."""
    if db.scalar("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'failed_turns'", default=0):
        return [(_TURN_COLUMNS.format(ending="ending"), *_TURNS), (_FAILED_COLUMNS, *_FAILED)]
    return [(_TURN_COLUMNS.format(ending="NULL"), *_TURNS)]


def _key(row: tuple) -> Cursor:
    return (row[1], row[7], 0 if row[8] else 1, row[0])


def latest_turns(db: "Database", count: int) -> list[dict[str, Any]]:
    """The newest ``count`` turns, failed ones included, oldest first, each with its tool calls."""
    rows = []
    for columns, table, failed, _, descending in _sources(db):
        found = db.query(f"SELECT {columns} FROM {table} ORDER BY {descending} LIMIT ?", (count,))
        rows += [(*row, failed) for row in found]
    rows.sort(key=_key)
    return _with_calls(db, rows[-count:] if count else [])


def turns_after(db: "Database", cursor: Cursor | None, limit: int = 200) -> list[dict[str, Any]]:
    """Turns (failed ones included) written after ``cursor`` (all of them when ``None``), oldest first, at most
    ``limit``."""
    rows = []
    for columns, table, failed, key, descending in _sources(db):
        after, params = (f"WHERE ({key}) > (?, ?, ?, ?)", cursor) if cursor else ("", ())
        ascending = descending.replace(" DESC", "")
        found = db.query(f"SELECT {columns} FROM {table} {after} ORDER BY {ascending} LIMIT ?", (*params, limit))
        rows += [(*row, failed) for row in found]
    rows.sort(key=_key)
    return _with_calls(db, rows[:limit])


def cursor_of(turns: list[dict[str, Any]], previous: Cursor | None) -> Cursor | None:
    """The cursor after showing ``turns``."""
    if not turns:
        return previous
    last = turns[-1]
    return (last["timestamp"], last.get("turnId", last["id"]), 0 if last["failed"] else 1, last["id"])


def _with_calls(db: "Database", rows: list[tuple]) -> list[dict[str, Any]]:
    turns = [{"id": r[0], "timestamp": r[1], "state": r[2], "inputSource": r[3], "thinking": r[4] or "",
              "costCents": int(r[5] or 0), "toolCalls": [], "failed": r[8], "ending": _ending(r[6]),
              **({"turnId": r[7]} if r[8] else {})} for r in rows]
    if not turns:
        return turns
    by_id = {turn["id"]: turn for turn in turns if not turn["failed"]}
    marks = ",".join("?" * len(by_id))
    for turn_id, name, arguments, result, error, duration in db.query(
            f"SELECT turn_id, name, arguments, substr(result, 1, {RESULT_HEAD}), error, duration_ms FROM tool_calls"
            f" WHERE turn_id IN ({marks}) ORDER BY rowid", tuple(by_id)):
        by_id[turn_id]["toolCalls"].append({"name": name, "arguments": _json_object(arguments), "error": error,
                                            "result": first_line(result), "durationMs": int(duration or 0)})
    return turns


def endings_of(db: "Database", turn_ids: list[str]) -> dict[str, dict[str, Any] | None]:
    """How each of these turns (of ``turns``) ended; ``None`` where no ending was recorded."""
    if not turn_ids or len(_sources(db)) == 1:  # a database from before endings were recorded
        return {}
    marks = ",".join("?" * len(turn_ids))
    return {turn_id: _ending(text) for turn_id, text in
            db.query(f"SELECT id, ending FROM turns WHERE id IN ({marks})", tuple(turn_ids))}


def _ending(text: str | None) -> dict[str, Any] | None:
    """A stored ending; ``None`` for turns written before endings were recorded (or an unreadable one)."""
    value = _json_object(text) if text else None
    return value if isinstance(value, dict) else None


def _json_object(text: str | None) -> Any:
    try:
        return orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return text

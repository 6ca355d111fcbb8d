"""What the agent did, read back from ``state.db``: turns with their tool calls, for ``automaton-min logs``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from automaton_min.store.db import Database

# A position in the turn history: (timestamp, id) of the last turn shown. Timestamps are fixed-width ISO text,
# so text order is time order; the id breaks ties.
Cursor = tuple[str, str]

_TURN_COLUMNS = "id, timestamp, state, input_source, thinking, cost_cents"
RESULT_HEAD = 400  # characters of a tool result read back: its first line is what is shown


def first_line(text: str | None) -> str:
    """The first non-empty line of a tool result, or ``""``."""
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def latest_turns(db: "Database", count: int) -> list[dict[str, Any]]:
    """The newest ``count`` turns, oldest first, each with its tool calls."""
    rows = db.query(f"SELECT {_TURN_COLUMNS} FROM turns ORDER BY timestamp DESC, id DESC LIMIT ?", (count,))
    return _with_calls(db, list(reversed(rows)))


def turns_after(db: "Database", cursor: Cursor | None, limit: int = 200) -> list[dict[str, Any]]:
    """Turns written after ``cursor`` (all of them when ``None``), oldest first, at most ``limit``."""
    if cursor is None:
        rows = db.query(f"SELECT {_TURN_COLUMNS} FROM turns ORDER BY timestamp, id LIMIT ?", (limit,))
    else:
        rows = db.query(f"SELECT {_TURN_COLUMNS} FROM turns WHERE (timestamp, id) > (?, ?) ORDER BY timestamp, id LIMIT ?",
                        (*cursor, limit))
    return _with_calls(db, rows)


def cursor_of(turns: list[dict[str, Any]], previous: Cursor | None) -> Cursor | None:
    """The cursor after showing ``turns``."""
    return (turns[-1]["timestamp"], turns[-1]["id"]) if turns else previous


def _with_calls(db: "Database", rows: list[tuple]) -> list[dict[str, Any]]:
    turns = [{"id": r[0], "timestamp": r[1], "state": r[2], "inputSource": r[3], "thinking": r[4] or "",
              "costCents": int(r[5] or 0), "toolCalls": []} for r in rows]
    if not turns:
        return turns
    by_id = {turn["id"]: turn for turn in turns}
    marks = ",".join("?" * len(by_id))
    for turn_id, name, arguments, result, error, duration in db.query(
            f"SELECT turn_id, name, arguments, substr(result, 1, {RESULT_HEAD}), error, duration_ms FROM tool_calls"
            f" WHERE turn_id IN ({marks}) ORDER BY rowid", tuple(by_id)):
        by_id[turn_id]["toolCalls"].append({"name": name, "arguments": _json_object(arguments), "error": error,
                                            "result": first_line(result), "durationMs": int(duration or 0)})
    return turns


def _json_object(text: str | None) -> Any:
    try:
        return orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return text

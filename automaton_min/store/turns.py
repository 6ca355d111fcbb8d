"""The ``turns`` and ``tool_calls`` tables: one row per turn, one per tool call (also in ``turns.tool_calls`` as JSON).

A tool-call row's key is ``<turn id>_<position>``; the provider's id (often ``call_0`` every turn) stays in the JSON.
``turns.ending`` is JSON: ``ended`` (``slept``, ``idle``, ``refused``, ``warned``, ``went on``, ``stopped``) with
``seconds`` and ``reason`` where they apply; a failed turn's ending (``failed``) goes to ``failed_turns``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from automaton_min.store.sqlite import columns_of

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database


@dataclass(frozen=True)
class StoredToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    result: str
    error: str | None
    duration_ms: int = 0
    provider_id: str | None = None


@dataclass(frozen=True)
class StoredTurn:
    id: str
    timestamp: str
    state: str
    input: str | None
    input_source: str | None
    thinking: str
    tool_calls: tuple[StoredToolCall, ...] = ()
    token_usage: dict[str, Any] = field(default_factory=dict)
    cost_cents: int = 0
    ending: dict[str, Any] | None = None

    @property
    def external(self) -> bool:
        """Whether the turn answered outsiders (its ending says so): their words reach only such turns."""
        return bool(self.ending) and self.ending.get("authority") == "external"


def insert_turn(db: "Database", turn: StoredTurn) -> None:
    """Write a turn and its tool calls (call it inside the turn's transaction)."""
    calls_json = orjson.dumps([
        {"id": c.id, "providerId": c.provider_id, "name": c.name, "arguments": c.arguments, "result": c.result,
         "error": c.error, "durationMs": c.duration_ms} for c in turn.tool_calls
    ]).decode()
    db.execute(
        "INSERT INTO turns (id, timestamp, state, input, input_source, thinking, tool_calls, token_usage, cost_cents,"
        " created_at, ending) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (turn.id, turn.timestamp, turn.state, turn.input, turn.input_source, turn.thinking, calls_json,
         orjson.dumps(turn.token_usage).decode(), turn.cost_cents, turn.timestamp,
         orjson.dumps(turn.ending).decode() if turn.ending is not None else None),
    )
    for call in turn.tool_calls:
        db.execute(
            "INSERT INTO tool_calls (id, turn_id, name, arguments, result, duration_ms, error, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (call.id, turn.id, call.name, orjson.dumps(call.arguments).decode(), call.result, call.duration_ms,
             call.error, turn.timestamp),
        )


def insert_failed_turn(db: "Database", failure_id: str, turn_id: str, timestamp: str, state: str,
                       input_source: str | None, ending: dict[str, Any]) -> None:
    """Record a turn that failed (its ``ending`` names the error); nothing else of it is written."""
    db.execute("INSERT INTO failed_turns (id, turn_id, timestamp, state, input_source, ending)"
               " VALUES (?, ?, ?, ?, ?, ?)",
               (failure_id, turn_id, timestamp, state, input_source, orjson.dumps(ending).decode()))


def _parse_calls(text: str | None) -> tuple[StoredToolCall, ...]:
    try:
        raw = orjson.loads(text or "[]")
    except orjson.JSONDecodeError:
        return ()
    calls = []
    for index, entry in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(entry, dict):
            continue
        arguments = entry.get("arguments") if isinstance(entry.get("arguments"), dict) else {}
        calls.append(StoredToolCall(str(entry.get("id") or f"call_{index}"), str(entry.get("name") or ""), arguments,
                                    str(entry.get("result") or ""), entry.get("error"),
                                    int(entry.get("durationMs") or 0), entry.get("providerId")))
    return tuple(calls)


def recent_turns(db: "Database", limit: int = 20, *, after: tuple[str, str] | None = None) -> list[StoredTurn]:
    """The newest ``limit`` turns, oldest first; with ``after`` (a turn's ``(timestamp, id)``), only turns that
    came after that one."""
    where, params = ("WHERE timestamp >= ? AND (timestamp > ? OR id > ?)", (after[0], *after)) if after else ("", ())
    ending = "ending" if "ending" in columns_of(db, "turns") else "NULL"  # a database read before its migration
    rows = db.query(
        f"SELECT id, timestamp, state, input, input_source, thinking, tool_calls, token_usage, cost_cents, {ending}"
        f" FROM turns {where} ORDER BY timestamp DESC, id DESC LIMIT ?", (*params, limit))
    turns = []
    for row in reversed(rows):
        usage, ending = _json_object(row[7]), _json_object(row[9])
        turns.append(StoredTurn(row[0], row[1], row[2], row[3], row[4], row[5] or "", _parse_calls(row[6]),
                                usage or {}, int(row[8] or 0), ending))
    return turns


def _json_object(text: str | None) -> dict[str, Any] | None:
    try:
        value = orjson.loads(text) if text else None
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def count_turns(db: "Database") -> int:
    return int(db.scalar("SELECT COUNT(*) FROM turns", default=0))


def last_turn_timestamp(db: "Database") -> str | None:
    """Timestamp of the newest turn (uses ``idx_turns_timestamp``)."""
    return db.scalar("SELECT MAX(timestamp) FROM turns")


def prune_turns(db: "Database", keep_latest: int) -> int:
    """Retention: keep the newest ``keep_latest`` turns (and their tool calls), delete the rest."""
    cutoff = db.scalar("SELECT timestamp FROM turns ORDER BY timestamp DESC, id DESC LIMIT 1 OFFSET ?", (keep_latest,))
    if cutoff is None:
        return 0
    with db.transaction():
        db.execute("DELETE FROM tool_calls WHERE turn_id IN (SELECT id FROM turns WHERE timestamp <= ?)", (cutoff,))
        db.execute("DELETE FROM turns WHERE timestamp <= ?", (cutoff,))
        return db.connection.changes()

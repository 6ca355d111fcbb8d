"""The ``kv`` table: small named values (agent state, timers, cursors)."""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

from automaton_min.clock import from_iso, to_iso
from automaton_min.log import get_logger

log = get_logger(__name__)
USDC_KEY = "last_known_usdc"

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database


def get_value(db: "Database", key: str) -> str | None:
    """The value stored under ``key``, or ``None``."""
    return db.scalar("SELECT value FROM kv WHERE key = ?", (key,))


def set_value(db: "Database", key: str, value: str, now_ms: int) -> None:
    """Store ``value`` under ``key``, stamping ``updated_at``."""
    db.execute(
        "INSERT INTO kv (key, value, updated_at) VALUES (?, ?, ?)"
        " ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        (key, value, to_iso(now_ms)),
    )


def delete_value(db: "Database", key: str) -> None:
    db.execute("DELETE FROM kv WHERE key = ?", (key,))


def set_json(db: "Database", key: str, value: object, now_ms: int) -> None:
    """Store ``value`` as JSON under ``key``."""
    import orjson

    set_value(db, key, orjson.dumps(value).decode(), now_ms)


def json_list(raw: str | None) -> list[Any]:
    """Stored text holding a JSON array; anything else reads as empty."""
    import orjson

    try:
        value = orjson.loads(raw) if raw else []
    except orjson.JSONDecodeError:
        return []
    return value if isinstance(value, list) else []


def json_object(raw: str | None) -> dict[str, Any]:
    """Stored text holding a JSON object; anything else (absent, damaged, another JSON type) reads as empty."""
    import orjson

    try:
        value = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def epoch_ms(value: str | None) -> int | None:
    """A stored time as epoch ms: epoch-ms digits (older automaton-min) or ISO (the reference); None if neither."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return int(text)
    try:
        return from_iso(text)
    except ValueError:
        log.warning("unreadable time in KV; ignoring it", extra={"value": text[:40]})
        return None

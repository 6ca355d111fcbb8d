"""The ``identity`` table: who this automaton is (name, address, creator, ...)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database


def read_identity(db: "Database") -> dict[str, str]:
    """Every identity row as a dict."""
    return dict(db.query("SELECT key, value FROM identity"))


def write_identity(db: "Database", values: Mapping[str, str], *, keep_existing: tuple[str, ...] = ()) -> None:
    """Upsert identity rows; keys in ``keep_existing`` are only written when absent."""
    for key, value in values.items():
        if key in keep_existing:
            db.execute("INSERT OR IGNORE INTO identity (key, value) VALUES (?, ?)", (key, value))
        else:
            db.execute(
                "INSERT INTO identity (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

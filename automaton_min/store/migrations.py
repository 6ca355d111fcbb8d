"""Schema migrations: an ordered list of named steps, recorded in ``schema_version``.

Each step runs in its own transaction together with the row that records it, so
a failing step leaves the database exactly as it was before that step. A step
already recorded is skipped, so migrating twice is a no-op.

Versions 1-99 belong to the reference runtime (its schema stops at 11); this
project's steps start at 100 and carry a ``name``. A database the reference
runtime created keeps its rows: each step creates what is missing and adapts
what is there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import apsw

from automaton_min.clock import SQL_NOW, Clock, to_iso
from automaton_min.errors import DatabaseError
from automaton_min.observe.log import get_logger

if TYPE_CHECKING:
    from automaton_min.store.db import Database

log = get_logger(__name__)


@dataclass(frozen=True)
class Migration:
    """One named schema step."""

    version: int
    name: str
    apply: Callable[["Database"], None]


MIGRATIONS: list[Migration] = []


def migration(version: int, name: str) -> Callable[[Callable[["Database"], None]], Callable[["Database"], None]]:
    """Register the decorated function as the step ``version``/``name``."""
    def register(func: Callable[["Database"], None]) -> Callable[["Database"], None]:
        MIGRATIONS.append(Migration(version, name, func))
        return func
    return register


def migrate(db: "Database", migrations: Sequence[Migration], now: Clock) -> list[str]:
    """Apply every step not yet recorded, in version order; return the names applied."""
    _ensure_version_table(db)
    applied = applied_names(db)
    done: list[str] = []
    for step in sorted(migrations, key=lambda m: m.version):
        if step.name in applied:
            continue
        try:
            with db.transaction():
                if db.scalar("SELECT 1 FROM schema_version WHERE name = ?", (step.name,)):
                    continue  # another process applied it while we waited for the lock
                step.apply(db)
                db.execute(
                    "INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)",
                    (step.version, step.name, to_iso(now())),
                )
        except apsw.Error as exc:  # the transaction has rolled the whole step back
            raise DatabaseError(
                f"{db.path}: migration {step.version} {step.name} failed ({exc}); the database is unchanged"
            ) from exc
        log.info("applied migration", extra={"version": step.version, "step": step.name})
        done.append(step.name)
    return done


def applied_names(db: "Database") -> set[str]:
    """Names of the steps recorded in ``schema_version``."""
    return {row[0] for row in db.query("SELECT name FROM schema_version WHERE name IS NOT NULL")}


def current_version(db: "Database") -> int:
    """The highest version recorded (0 for an empty database)."""
    return int(db.scalar("SELECT MAX(version) FROM schema_version", default=0) or 0)


def latest_version(migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """The version a fully migrated database reaches."""
    return max(m.version for m in migrations)


def _ensure_version_table(db: "Database") -> None:
    if not table_exists(db, "schema_version"):
        with db.transaction():
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_version ("
                " version INTEGER PRIMARY KEY,"
                f" applied_at TEXT NOT NULL DEFAULT ({SQL_NOW}),"
                " name TEXT)"
            )
    elif "name" not in columns_of(db, "schema_version"):
        with db.transaction():
            db.execute("ALTER TABLE schema_version ADD COLUMN name TEXT")


def table_exists(db: "Database", table: str) -> bool:
    return bool(db.scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)))


def columns_of(db: "Database", table: str) -> list[str]:
    return [row[1] for row in db.query(f"PRAGMA table_info({table})")]


def add_missing_columns(db: "Database", table: str, columns: dict[str, str]) -> None:
    """``ALTER TABLE ... ADD COLUMN`` for each column the table lacks (errors are not swallowed)."""
    present = set(columns_of(db, table))
    for name, declaration in columns.items():
        if name not in present:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")


_STORED_GLOB = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z"


def normalize_timestamps(db: "Database", table: str, columns: Sequence[str]) -> None:
    """Rewrite date-time text in ``columns`` into the one stored format.

    The reference runtime wrote both ``2026-02-19 14:00:00`` and
    ``2026-02-19T14:00:00.000Z``; text comparisons across the two are wrong.
    Values that are not date-times are left alone.
    """
    for column in columns:
        db.execute(
            f"UPDATE {table} SET {column} = strftime('%Y-%m-%dT%H:%M:%fZ', {column})"
            f" WHERE {column} GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*'"
            f" AND {column} NOT GLOB '{_STORED_GLOB}'"
            f" AND strftime('%Y-%m-%dT%H:%M:%fZ', {column}) IS NOT NULL"
        )


# Import the modules that register steps, in order (they append to MIGRATIONS).
from automaton_min.store import schema_core, schema_inference, schema_memory, schema_payments, schema_policy, schema_runtime, schema_social  # noqa: E402,F401,E501

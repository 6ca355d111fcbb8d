"""Schema migrations: the one ordered list of named steps, recorded in ``schema_version`` (README: The home directory).

A recorded step is skipped; each creates what is missing and adapts what is there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import apsw

from automaton_min.clock import SQL_NOW, Clock, to_iso
from automaton_min.errors import DatabaseError
from automaton_min.log import get_logger
from automaton_min.store import (children, goals, modifications, schema_core, schema_inference, schema_memory,
                                 schema_payments, schema_policy, schema_runtime, schema_social)
from automaton_min.store.sqlite import Database, columns_of, table_exists

log = get_logger(__name__)


@dataclass(frozen=True)
class Migration:
    """One named schema step."""

    version: int
    name: str
    apply: Callable[[Database], None]


def migrate(db: Database, migrations: Sequence[Migration], now: Clock) -> list[str]:
    """Apply every step not yet recorded, in version order; return the names applied. Each step is logged at debug (a
    new database takes them all); an existing database that was upgraded gets one info line."""
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
        log.debug("applied migration", extra={"version": step.version, "step": step.name})
        done.append(step.name)
    if done and applied:
        log.info("database schema upgraded", extra={"steps": done})
    return done


def applied_names(db: Database) -> set[str]:
    """Names of the steps recorded in ``schema_version``."""
    return {row[0] for row in db.query("SELECT name FROM schema_version WHERE name IS NOT NULL")}


def current_version(db: Database) -> int:
    """The highest version recorded (0 for an empty database)."""
    return int(db.scalar("SELECT MAX(version) FROM schema_version", default=0) or 0)


def latest_version(migrations: Sequence[Migration] | None = None) -> int:
    """The version a fully migrated database reaches."""
    return max(m.version for m in (MIGRATIONS if migrations is None else migrations))


def _ensure_version_table(db: Database) -> None:
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


# Every step, in the order it runs. Versions 1-99 are the reference runtime's; ours start at 100.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(100, "core_tables", schema_core.create_core_tables),
    Migration(101, "one_timestamp_format", schema_core.normalize_core_timestamps),
    Migration(102, "payment_intents", schema_payments.create_payment_intents),
    Migration(103, "inference_and_spend_tables", schema_inference.create_inference_tables),
    Migration(104, "policy_decisions", schema_policy.create_policy_decisions),
    Migration(105, "runtime_tables", schema_runtime.create_runtime_tables),
    Migration(106, "social_relay_and_approvals", schema_social.create_social_tables),
    Migration(107, "memory_tables", schema_memory.create_memory_tables),
    Migration(108, "turn_order_index", schema_core.index_turn_order),
    Migration(109, "sent_messages_and_crash_counts", schema_social.create_sent_messages),
    Migration(110, "known_payees_and_approval_reasons", schema_social.create_known_payees),
    Migration(111, "turn_endings", schema_core.record_turn_endings),
    Migration(112, "creator_commands", schema_social.create_creator_commands),
    Migration(113, "soul_history", schema_core.create_soul_history),
    Migration(114, "modifications", modifications.create_modifications),
    Migration(115, "children", children.create_children),
    Migration(116, "goals", goals.create_goals),
)

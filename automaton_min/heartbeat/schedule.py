"""The schedule in ``heartbeat_schedule`` and its history in ``heartbeat_history``: rows, seeding, leases, results
(README: Heartbeat). Seeding inserts only the missing rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from automaton_min.clock import MINUTE_MS, from_iso, to_iso
from automaton_min.ids import new_ulid
from automaton_min.tiers import TIERS

if TYPE_CHECKING:
    from automaton_min.store.db import Database

LEASE_TTL_MS = MINUTE_MS
RETRY_DELAY_MS = 30_000
HISTORY_FAILURES_LOOKBACK = 20


@dataclass(frozen=True)
class TaskDefault:
    """A default schedule entry: the task's name, its cron, the lowest tier it runs at, its limits."""

    name: str
    cron: str
    tier_minimum: str = "dead"
    timeout_ms: int = 30_000
    max_retries: int = 1
    priority: int = 0
    enabled: bool = True


@dataclass(frozen=True)
class ScheduleRow:
    task_name: str
    cron_expression: str
    enabled: bool
    priority: int
    timeout_ms: int
    max_retries: int
    tier_minimum: str
    last_run_at: int | None
    next_run_at: int | None
    last_result: str | None
    last_error: str | None
    run_count: int
    fail_count: int
    lease_owner: str | None
    lease_expires_at: int | None
    interval_ms: int | None = None  # when set, due this long after the last run instead of by the cron

    def as_json(self) -> dict[str, object]:
        def iso(ms: int | None) -> str | None:
            return None if ms is None else to_iso(ms)

        return {"name": self.task_name, "cron": self.cron_expression, "enabled": self.enabled,
                "tierMinimum": self.tier_minimum, "timeoutMs": self.timeout_ms, "maxRetries": self.max_retries,
                "priority": self.priority, "lastRunAt": iso(self.last_run_at), "nextRunAt": iso(self.next_run_at),
                "lastResult": self.last_result, "lastError": self.last_error, "runCount": self.run_count,
                "failCount": self.fail_count, "leaseOwner": self.lease_owner, "intervalMs": self.interval_ms}


_COLUMNS = ("task_name, cron_expression, enabled, priority, timeout_ms, max_retries, tier_minimum, last_run_at, "
            "next_run_at, last_result, last_error, run_count, fail_count, lease_owner, lease_expires_at, interval_ms")


def _ms(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return from_iso(text)
    except ValueError:
        return None


def _row(r: tuple) -> ScheduleRow:
    tier = r[6] if r[6] in TIERS else "dead"
    return ScheduleRow(r[0], r[1], bool(r[2]), int(r[3] or 0), int(r[4] or 30_000), int(r[5] or 0), tier,
                       _ms(r[7]), _ms(r[8]), r[9], r[10], int(r[11] or 0), int(r[12] or 0), r[13], _ms(r[14]),
                       int(r[15]) if r[15] else None)


def read_schedule(db: "Database") -> list[ScheduleRow]:
    """Every row, in run order (priority, then name)."""
    return [_row(r) for r in db.query(f"SELECT {_COLUMNS} FROM heartbeat_schedule ORDER BY priority, task_name")]


def read_row(db: "Database", name: str) -> ScheduleRow | None:
    r = db.query_one(f"SELECT {_COLUMNS} FROM heartbeat_schedule WHERE task_name = ?", (name,))
    return None if r is None else _row(r)


def set_interval(db: "Database", name: str, interval_ms: int | None, now_ms: int) -> None:
    """Run ``name`` every ``interval_ms`` instead of by its cron (None: by its cron); written only when it changes."""
    db.execute("UPDATE heartbeat_schedule SET interval_ms = ?, updated_at = ?"
               " WHERE task_name = ? AND interval_ms IS NOT ?", (interval_ms, to_iso(now_ms), name, interval_ms))


def seed(db: "Database", defaults: Iterable[TaskDefault], now_ms: int) -> list[str]:
    """Insert the default rows that are missing (existing rows are never touched); returns the names added."""
    added = []
    stamp = to_iso(now_ms)
    with db.transaction():
        for d in defaults:
            db.execute(
                "INSERT OR IGNORE INTO heartbeat_schedule (task_name, cron_expression, enabled, priority, timeout_ms,"
                " max_retries, tier_minimum, run_count, fail_count, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?)",
                (d.name, d.cron, int(d.enabled), d.priority, d.timeout_ms, d.max_retries, d.tier_minimum, stamp, stamp))
            if db.connection.changes():
                added.append(d.name)
    return added


def acquire_lease(db: "Database", name: str, owner: str, now_ms: int, ttl_ms: int = LEASE_TTL_MS) -> bool:
    """Take the row's lease when it is free, expired or already ours."""
    db.execute("UPDATE heartbeat_schedule SET lease_owner = ?, lease_expires_at = ? WHERE task_name = ? AND "
               "(lease_owner IS NULL OR lease_owner = ? OR lease_expires_at IS NULL OR lease_expires_at <= ?)",
               (owner, to_iso(now_ms + ttl_ms), name, owner, to_iso(now_ms)))
    return db.connection.changes() == 1


def renew_lease(db: "Database", name: str, owner: str, now_ms: int, ttl_ms: int = LEASE_TTL_MS) -> None:
    db.execute("UPDATE heartbeat_schedule SET lease_expires_at = ? WHERE task_name = ? AND lease_owner = ?",
               (to_iso(now_ms + ttl_ms), name, owner))


def release_lease(db: "Database", name: str, owner: str) -> None:
    db.execute("UPDATE heartbeat_schedule SET lease_owner = NULL, lease_expires_at = NULL "
               "WHERE task_name = ? AND lease_owner = ?", (name, owner))


def failure_streak(db: "Database", name: str) -> int:
    """How many of the task's latest runs failed or timed out in a row ('skipped' rows are passed over)."""
    streak = 0
    for (result,) in db.query("SELECT result FROM heartbeat_history WHERE task_name = ? AND result != 'skipped' "
                              "ORDER BY started_at DESC, id DESC LIMIT ?", (name, HISTORY_FAILURES_LOOKBACK)):
        if result == "success":
            break
        streak += 1
    return streak


def record(db: "Database", row: ScheduleRow, result: str, *, started_ms: int, completed_ms: int, duration_ms: int,
           error: str | None, owner: str | None, release: bool = True, routine: bool = False,
           retry_in_ms: int | None = None) -> int | None:
    """Write the history row (none for a ``routine`` success after a success) and the schedule's outcome; returns the
    retry time set: 30 s after a failure while retries are left, or ``retry_in_ms`` (a remote part's back-off)."""
    retry_at = None
    with db.transaction():
        if not (routine and result == "success" and row.last_result == "success"):
            db.execute("INSERT INTO heartbeat_history (id, task_name, started_at, completed_at, result, duration_ms,"
                       " error) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (new_ulid(started_ms), row.task_name, to_iso(started_ms), to_iso(completed_ms), result,
                        duration_ms, error[:1000] if error else None))
        failed = result in ("failure", "timeout")
        if failed and retry_in_ms is not None:
            retry_at = completed_ms + retry_in_ms
        elif failed and failure_streak(db, row.task_name) - 1 < row.max_retries:
            retry_at = completed_ms + RETRY_DELAY_MS
        db.execute("UPDATE heartbeat_schedule SET last_run_at = ?, next_run_at = ?, last_result = ?, last_error = ?,"
                   " run_count = run_count + 1, fail_count = fail_count + ?, updated_at = ? WHERE task_name = ?",
                   (to_iso(started_ms), None if retry_at is None else to_iso(retry_at), result,
                    error[:1000] if error else None, int(failed), to_iso(completed_ms), row.task_name))
        if release and owner:
            release_lease(db, row.task_name, owner)
    return retry_at


def record_skipped(db: "Database", name: str, reason: str, now_ms: int) -> None:
    """A history row and ``last_result`` 'skipped' (run times and counters unchanged)."""
    with db.transaction():
        db.execute("INSERT INTO heartbeat_history (id, task_name, started_at, completed_at, result, duration_ms, error)"
                   " VALUES (?, ?, ?, ?, 'skipped', 0, ?)",
                   (new_ulid(now_ms), name, to_iso(now_ms), to_iso(now_ms), reason))
        db.execute("UPDATE heartbeat_schedule SET last_result = 'skipped', last_error = ?, updated_at = ? "
                   "WHERE task_name = ?", (reason, to_iso(now_ms), name))


def request_run(db: "Database", name: str, now_ms: int) -> bool:
    """Make the task due now (``next_run_at``); False when there is no such row."""
    db.execute("UPDATE heartbeat_schedule SET next_run_at = ?, updated_at = ? WHERE task_name = ?",
               (to_iso(now_ms), to_iso(now_ms), name))
    return db.connection.changes() == 1


def set_enabled(db: "Database", name: str, enabled: bool, now_ms: int) -> bool:
    db.execute("UPDATE heartbeat_schedule SET enabled = ?, updated_at = ? WHERE task_name = ?",
               (int(enabled), to_iso(now_ms), name))
    return db.connection.changes() == 1


def set_cron(db: "Database", name: str, cron: str, now_ms: int) -> bool:
    db.execute("UPDATE heartbeat_schedule SET cron_expression = ?, updated_at = ? WHERE task_name = ?",
               (cron, to_iso(now_ms), name))
    return db.connection.changes() == 1

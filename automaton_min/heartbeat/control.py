"""Changing the schedule from outside the scheduler: the ``modify_heartbeat`` tool and ``automaton-min heartbeat``.

Changes go to ``heartbeat_schedule`` through the caller's own connection, then the daemon's scheduler is poked so
it re-reads the schedule at once. Only known tasks can be added.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable

from automaton_min.clock import Clock, system_now
from automaton_min.cron import parse
from automaton_min.errors import UserError
from automaton_min.heartbeat import schedule as sched

if TYPE_CHECKING:
    from automaton_min.config import Config
    from automaton_min.home import Home
    from automaton_min.store.db import Database


def ensure_schedule(db: "Database", home: "Home", config: "Config", now_ms: int, *,
                    defaults: Iterable[sched.TaskDefault] | None = None,
                    known: Iterable[str] = ()) -> list[str]:
    """Import heartbeat.yml once, then insert the default rows that are missing; returns the rows added."""
    from automaton_min.heartbeat.tasks import DEFAULT_SCHEDULE, KNOWN_TASKS
    from automaton_min.heartbeat.yml_import import import_once

    defaults = tuple(DEFAULT_SCHEDULE if defaults is None else defaults)
    import_once(db, home, config, set(known) | set(KNOWN_TASKS) | {d.name for d in defaults}, now_ms, defaults)
    return sched.seed(db, defaults, now_ms)


# Tasks the agent's modify_heartbeat leaves alone, and the setting that governs each instead.
OWNER_ONLY = {"check_for_updates": "updates, updateManifestUrl"}


class HeartbeatControl:
    """Schedule changes on ``db`` (the calling thread's connection); ``poke`` tells the scheduler (may be None)."""

    def __init__(self, db: "Database", *, poke: Callable[[], None] | None = None, now: Clock = system_now,
                 known_tasks: frozenset[str] | None = None) -> None:
        from automaton_min.heartbeat.tasks import KNOWN_TASKS

        self.db, self.poke, self.now = db, poke, now
        self.known = KNOWN_TASKS if known_tasks is None else known_tasks

    def _changed(self) -> None:
        if self.poke is not None:
            self.poke()

    def row(self, name: str) -> sched.ScheduleRow:
        row = sched.read_row(self.db, name)
        if row is None:
            names = ", ".join(r.task_name for r in sched.read_schedule(self.db)) or "none"
            raise UserError(f"no heartbeat task named {name!r} (scheduled: {names})")
        return row

    def set_enabled(self, name: str, enabled: bool) -> sched.ScheduleRow:
        self.row(name)
        sched.set_enabled(self.db, name, enabled, self.now())
        self._changed()
        return self.row(name)

    def request_run(self, name: str) -> sched.ScheduleRow:
        """Make ``name`` due now (the daemon runs it at its next pass); refuses a disabled task."""
        row = self.row(name)
        if not row.enabled:
            raise UserError(f"heartbeat task {name!r} is disabled; enable it first: "
                            f"automaton-min heartbeat enable {name}")
        sched.request_run(self.db, name, self.now())
        self._changed()
        return row

    def modify(self, action: str, name: str, *, schedule: str | None = None, task: str | None = None,
               enabled: bool | None = None) -> str:
        """The tool's add / update / remove; returns a sentence for the model."""
        if name in OWNER_ONLY:
            raise UserError(f"{name} follows the owner's settings ({OWNER_ONLY[name]}); the agent does not change it")
        if task is not None and task != name:
            raise UserError(f"each task has one entry named after it: use name {task!r}")
        if schedule is not None:
            parse(schedule)  # a CronError (a UserError) names the field
        now_ms = self.now()
        if action == "add":
            if name not in self.known:
                raise UserError(f"unknown task {name!r}; known tasks: {', '.join(sorted(self.known))}")
            if sched.read_row(self.db, name) is not None:
                raise UserError(f"{name!r} is already scheduled; use action 'update'")
            if schedule is None:
                raise UserError("adding an entry needs a schedule (5-field cron)")
            from automaton_min.heartbeat.tasks import DEFAULT_SCHEDULE

            default = next((d for d in DEFAULT_SCHEDULE if d.name == name), sched.TaskDefault(name, schedule))
            row = sched.TaskDefault(name, schedule, default.tier_minimum, default.timeout_ms, default.max_retries,
                                    default.priority, enabled is not False)
            sched.seed(self.db, [row], now_ms)
            done = f"added {name} ({schedule})"
        elif action == "update":
            self.row(name)
            if schedule is None and enabled is None:
                raise UserError("nothing to update: give a schedule or enabled")
            with self.db.transaction():
                if schedule is not None:
                    sched.set_cron(self.db, name, schedule, now_ms)
                if enabled is not None:
                    sched.set_enabled(self.db, name, enabled, now_ms)
            row = self.row(name)
            done = f"updated {name}: {row.cron_expression}, {'enabled' if row.enabled else 'disabled'}"
        elif action == "remove":
            self.row(name)
            sched.set_enabled(self.db, name, False, now_ms)  # kept (with its history), so a restart does not re-add it
            done = f"disabled {name} (entries are kept with their history; update with enabled=true to resume)"
        else:
            raise UserError(f"unknown action {action!r}: add, update or remove")
        self._changed()
        return f"Heartbeat {done}."

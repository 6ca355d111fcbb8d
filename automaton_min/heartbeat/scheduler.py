"""The durable scheduler: runs due heartbeat tasks on its own thread, sleeping until the next one is due.

README (Heartbeat) says when a task is due and how leases, timeouts and retries work. When no worker thread can be
had (the pids cgroup is full) a run happens on the scheduler's own thread and ends when the task does, whatever its
timeout.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from automaton_min.clock import Clock, system_now
from automaton_min.cron import CronError, next_after, timezone_named
from automaton_min.heartbeat import schedule as sched
from automaton_min.heartbeat.task_api import ServiceUnreachable, TaskContext, TaskFunction, TaskResult
from automaton_min.ids import new_ulid
from automaton_min.log import get_logger
from automaton_min.tiers import TIER_RANK
from automaton_min.workers import Workers

if TYPE_CHECKING:
    from automaton_min.config import Config
    from automaton_min.home import Home
    from automaton_min.heartbeat.parts import PartStates
    from automaton_min.store.wake import WakeBus
    from automaton_min.store.db import Database

log = get_logger(__name__)

MAX_SLEEP_S = 900.0
PROGRESS_WHILE_WAITING_S = 5.0
ContextFactory = Callable[["Database", threading.Event], TaskContext]


@dataclass
class Ran:
    """One run the scheduler started: the task, its result ('success', 'failure', 'timeout', 'skipped')."""

    name: str
    result: str
    error: str | None = None
    wake: str | None = None
    retry_at: int | None = None
    summary: str = ""


@dataclass
class _Run:
    name: str
    stop: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)  # its worker is free again
    returned: bool = False  # the task function returned (read and written under the scheduler's lock)
    result: TaskResult | None = None
    error: str | None = None
    unreachable: str | None = None  # the part a ServiceUnreachable named


def _owner_id() -> str:
    return f"scheduler-{socket.gethostname()}-{os.getpid()}-{new_ulid(system_now())[-6:]}"


class Scheduler:
    """``tasks`` maps task names to functions; ``extra_tasks`` (a dict others may fill later) is looked up at run time.
    ``context_factory(db, stop)`` builds the ``TaskContext`` for one run from the worker's own connection.
    """

    def __init__(self, home: "Home", config: "Config", db_path: Path, tasks: Mapping[str, TaskFunction],
                 context_factory: ContextFactory, wake_bus: "WakeBus | None", *, now: Clock = system_now,
                 extra_tasks: Mapping[str, TaskFunction] | None = None, defaults: Any = None,
                 tier_of: Callable[["Database"], str] | None = None, metrics: Any = None,
                 intervals: Mapping[str, int] | None = None, parts: "PartStates | None" = None,
                 signal: threading.Event | None = None) -> None:
        from automaton_min.heartbeat.tasks import DEFAULT_SCHEDULE, known_tier
        from automaton_min.heartbeat.parts import PartStates

        self.home, self.config, self.db_path = home, config, Path(db_path)
        self.tasks = tasks
        self.extra_tasks = extra_tasks if extra_tasks is not None else {}
        self.context_factory = context_factory
        self.wake_bus = wake_bus
        self.metrics = metrics  # observe.metrics.Metrics: heartbeat_task(name, ok=...) per finished run
        self.intervals = dict(intervals or {})  # task -> ms between runs, set from config at start (instead of cron)
        self.now = now
        self.defaults = DEFAULT_SCHEDULE if defaults is None else defaults
        self.tier_of = tier_of or (lambda db: known_tier(db, config))
        self.tz = timezone_named(config.get("heartbeatTimezone"))
        self.owner = _owner_id()
        self.progress = time.monotonic()
        self._signal = signal or threading.Event()  # set: re-read the schedule now
        self._task_signal = threading.Event()  # a run ended, or the scheduler is stopping
        self._stopping = threading.Event()
        self._running: dict[str, _Run] = {}  # runs whose thread has not ended (overran their timeout)
        self._lock = threading.Lock()
        self._missing_reported: set[str] = set()
        self._bad_cron_reported: set[str] = set()
        self.parts = parts if parts is not None else PartStates({})  # remote parts: said when their state changes
        self._thread: threading.Thread | None = None
        self._workers = Workers("heartbeat-task")
        self._sleeping = False

    # ------------------------------------------------------------------ control (any thread)

    def start(self) -> None:
        """Start the scheduler's thread (it opens its own connection, imports heartbeat.yml once, seeds rows)."""
        if self._thread is not None:
            raise RuntimeError("the scheduler is already started")
        self._thread = threading.Thread(target=self._main, name="heartbeat", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Ask the thread to end (running tasks see ``ctx.stop``) and join it; True when it ended in time."""
        self._stopping.set()
        with self._lock:
            for run in self._running.values():
                run.stop.set()
        self._signal.set()
        self._task_signal.set()
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def poke(self) -> None:
        """Re-read the schedule now (it changed, or SIGUSR1 came)."""
        self._signal.set()

    def alive_at(self) -> float:
        """Monotonic time of the thread's last sign of life: now while it sleeps on its event, else ``progress``."""
        return time.monotonic() if self._sleeping else self.progress

    def function(self, name: str) -> TaskFunction | None:
        return self.tasks.get(name) or self.extra_tasks.get(name)

    # ------------------------------------------------------------------ the thread

    def _main(self) -> None:
        from automaton_min.store.db import open_database

        db = open_database(self.db_path, now=self.now, quick_check=False)
        try:
            self.prepare(db)
            while not self._stopping.is_set():
                self.progress = time.monotonic()
                try:
                    self.run_due(db, self.now())
                    delay = self.seconds_until_due(db, self.now())
                except Exception:  # noqa: BLE001 - the loop's outer boundary: log, never let the thread die
                    log.exception("heartbeat pass failed; trying again in a minute")
                    delay = 60.0
                self._sleeping = True
                try:
                    self._signal.wait(delay)
                finally:
                    self._sleeping = False
                self._signal.clear()
        finally:
            db.close()

    def prepare(self, db: "Database") -> None:
        """At start: import a reference heartbeat.yml once, then insert the default rows that are missing."""
        from automaton_min.heartbeat.control import ensure_schedule

        added = ensure_schedule(db, self.home, self.config, self.now(), defaults=self.defaults,
                                known=set(self.tasks) | set(self.extra_tasks))
        if added:
            log.debug("heartbeat schedule: rows added", extra={"tasks": added})
        for name, interval_ms in self.intervals.items():
            sched.set_interval(db, name, interval_ms, self.now())

    def run_task(self, db: "Database", name: str) -> Ran:
        """Run ``name`` now, whatever its cron (enabled, tier and lease still apply): the CLI without a daemon."""
        from automaton_min.errors import UserError

        row = sched.read_row(db, name)
        if row is None:
            raise UserError(f"no heartbeat task named {name!r}")
        tier = self.tier_of(db)
        if not row.enabled:
            raise UserError(f"heartbeat task {name!r} is disabled; enable it first: "
                            f"automaton-min heartbeat enable {name}")
        if TIER_RANK[tier] < TIER_RANK[row.tier_minimum]:
            raise UserError(f"heartbeat task {name!r} runs at tier {row.tier_minimum} or better; the agent is {tier}")
        function = self.function(name)
        if function is None:
            raise UserError(f"heartbeat task {name!r} only runs inside the daemon (automaton-min run)")
        if not sched.acquire_lease(db, name, self.owner, self.now()):
            raise UserError(f"heartbeat task {name!r} is running elsewhere (its lease is held)")
        return self._execute(db, row, function)

    def _due_at(self, row: sched.ScheduleRow, now_ms: int) -> int | None:
        """When ``row`` is next due (epoch ms; may be in the past), ignoring tier and lease; None: never."""
        if row.next_run_at is not None:
            return row.next_run_at
        if row.last_run_at is None:
            return now_ms
        if row.interval_ms:
            return row.last_run_at + row.interval_ms
        try:
            return next_after(row.cron_expression, min(row.last_run_at, now_ms), self.tz)
        except CronError as exc:
            if row.task_name not in self._bad_cron_reported:
                self._bad_cron_reported.add(row.task_name)
                log.warning("heartbeat task has an unusable cron; it does not run",
                            extra={"task": row.task_name, "error": str(exc)})
            return None

    def _eligible(self, row: sched.ScheduleRow, tier: str) -> bool:
        return row.enabled and TIER_RANK[tier] >= TIER_RANK[row.tier_minimum] and row.task_name not in self._running

    def seconds_until_due(self, db: "Database", now_ms: int) -> float:
        """How long the thread may sleep: until the earliest eligible row is due (or a foreign lease expires)."""
        tier = self.tier_of(db)
        earliest: int | None = None
        with self._lock:
            self._reap()
            if self._running:  # renew the leases of overrunning tasks in time
                earliest = now_ms + sched.LEASE_TTL_MS // 2
        for row in sched.read_schedule(db):
            if not self._eligible(row, tier) or self.function(row.task_name) is None:
                continue
            due = self._due_at(row, now_ms)
            if due is None:
                continue
            if row.lease_owner and row.lease_owner != self.owner and (row.lease_expires_at or 0) > now_ms:
                due = max(due, row.lease_expires_at or 0)
            earliest = due if earliest is None else min(earliest, due)
        if earliest is None:
            return MAX_SLEEP_S
        return min(MAX_SLEEP_S, max(0.0, (earliest - now_ms) / 1000))

    def _reap(self) -> None:
        for name in [n for n, r in self._running.items() if r.done.is_set()]:
            del self._running[name]

    def run_due(self, db: "Database", now_ms: int) -> list[Ran]:
        """One pass: run every due task, one at a time, by priority; returns what ran (or was skipped)."""
        tier = self.tier_of(db)
        with self._lock:
            self._reap()
            for run in self._running.values():
                sched.renew_lease(db, run.name, self.owner, now_ms)
        ran: list[Ran] = []
        for row in sched.read_schedule(db):
            if self._stopping.is_set():
                break
            if not self._eligible(row, tier):
                continue
            due = self._due_at(row, now_ms)
            if due is None or due > now_ms:
                continue
            function = self.function(row.task_name)
            if function is None:
                self._report_missing(db, row.task_name, now_ms, ran)
                continue
            if not sched.acquire_lease(db, row.task_name, self.owner, now_ms):
                continue
            ran.append(self._execute(db, row, function))
        return ran

    def _report_missing(self, db: "Database", name: str, now_ms: int, ran: list[Ran]) -> None:
        if name in self._missing_reported:
            return
        self._missing_reported.add(name)
        reason = self.parts.off_tasks().get(name)  # its part is off: the start banner said so already
        if reason is None:
            reason = "no function for this task in this run"
            log.warning("heartbeat task skipped: not available in this run", extra={"task": name})
        sched.record_skipped(db, name, reason, now_ms)
        ran.append(Ran(name, "skipped", reason))

    def _execute(self, db: "Database", row: sched.ScheduleRow, function: TaskFunction) -> Ran:
        started_ms = self.now()
        started = time.monotonic()
        run = _Run(row.task_name)
        if self._stopping.is_set():
            run.stop.set()
        with self._lock:
            self._running[row.task_name] = run
        self._workers.submit(lambda: self._work(run, function), run.done, self._task_signal)
        deadline = started + row.timeout_ms / 1000
        while not run.done.is_set() and not self._stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._task_signal.wait(min(left, PROGRESS_WHILE_WAITING_S))
            self._task_signal.clear()
            self.progress = time.monotonic()
        duration_ms = int((time.monotonic() - started) * 1000)
        if not run.done.is_set() and self._cut_off(run):
            if self._stopping.is_set():  # shutting down: its worker releases the lease when the task ends
                return Ran(row.task_name, "timeout", "the scheduler stopped before the task ended")
            error = f"timed out after {row.timeout_ms} ms"
            log.warning("heartbeat task timed out; it keeps its lease until it ends", extra={"task": row.task_name})
            retry = sched.record(db, row, "timeout", started_ms=started_ms, completed_ms=self.now(),
                                 duration_ms=duration_ms, error=error, owner=self.owner, release=False)
            self._count(row.task_name, False)
            return Ran(row.task_name, "timeout", error, retry_at=retry)
        with self._lock:
            self._running.pop(row.task_name, None)
        if run.error is not None:
            wait_ms = None
            if run.unreachable is None:
                log.warning("heartbeat task failed", extra={"task": row.task_name, "error": run.error})
                self._count(row.task_name, False)
            else:  # its part is down: not the task's failure, said when the part's state changes, tried later
                wait_ms = self.parts.unreachable(db, run.unreachable, run.error, self.now())
            retry = sched.record(db, row, "failure", started_ms=started_ms, completed_ms=self.now(),
                                 duration_ms=duration_ms, error=run.error, owner=self.owner, retry_in_ms=wait_ms)
            return Ran(row.task_name, "failure", run.error, retry_at=retry)
        result = run.result or TaskResult()
        for part in result.reached:
            self.parts.answered(db, part, self.now())
        sched.record(db, row, "success", started_ms=started_ms, completed_ms=self.now(), duration_ms=duration_ms,
                     error=None, owner=self.owner, routine=not result.wake)
        self._count(row.task_name, True)
        if result.wake:
            self._wake(db, row.task_name, result)
        log.debug("heartbeat task done", extra={"task": row.task_name, "summary": result.summary[:200]})
        return Ran(row.task_name, "success", wake=result.wake, summary=result.summary)

    def _cut_off(self, run: _Run) -> bool:
        """Set ``run.stop`` unless the task has returned already (then wait for its worker to finish closing up).

        True: it was still running; its worker releases the lease when it ends."""
        with self._lock:
            if not run.returned:
                run.stop.set()
                return True
        run.done.wait()
        return False

    def _count(self, name: str, ok: bool) -> None:
        if self.metrics is not None:
            self.metrics.heartbeat_task(name, ok=ok)

    def _wake(self, db: "Database", name: str, result: TaskResult) -> None:
        payload = {"task": name, **result.wake_payload}
        source = str(payload.get("source") or "heartbeat")  # "social": work the loop reads from the inbox
        if self.wake_bus is not None:
            self.wake_bus.request(db, source, result.wake or "", payload, now_ms=self.now())
        else:  # no daemon (a CLI run): store it for the agent's next start
            from automaton_min.store.wake import post_wake

            post_wake(db, source, result.wake or "", payload, now_ms=self.now())

    def _work(self, run: _Run, function: TaskFunction) -> None:
        """On a worker: its own connection, the task, and the lease released when it really ends (the worker then
        sets ``run.done`` and ``_task_signal``)."""
        from automaton_min.crashpoint import crash_point
        from automaton_min.store.db import open_database

        db = None
        try:
            db = open_database(self.db_path, now=self.now, quick_check=False)
            crash_point("heartbeat_task")
            result = function(self.context_factory(db, run.stop))
            run.result = result if isinstance(result, TaskResult) else TaskResult(str(result or ""))
        except Exception as exc:  # noqa: BLE001 - a task's boundary: its failure is recorded, never fatal
            log.debug("heartbeat task raised", exc_info=True, extra={"task": run.name})
            run.error = f"{type(exc).__name__}: {exc}"[:1000]
            run.unreachable = exc.part if isinstance(exc, ServiceUnreachable) else None
        finally:
            with self._lock:
                run.returned = True
                overran = run.stop.is_set()
            if db is not None:
                if overran:  # the scheduler recorded a timeout and left the lease to us
                    sched.release_lease(db, run.name, self.owner)
                db.close()

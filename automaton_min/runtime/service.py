"""The long-lived service around the agent: what ``automaton-min run`` starts, runs and stops (README: The service)."""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

from automaton_min.clock import Clock, system_now
from automaton_min.config import Config, db_path
from automaton_min.home import Home
from automaton_min.log import get_logger
from automaton_min.runtime.daemon import SHUTDOWN_GRACE_S, Signals, serve
from automaton_min.runtime.sdnotify import Notifier, Progress, Watchdog

if TYPE_CHECKING:
    from automaton_min.heartbeat.scheduler import Scheduler
    from automaton_min.observe.metrics import Metrics
    from automaton_min.runtime.agent_runtime import Agent
    from automaton_min.heartbeat.parts import PartStates
    from automaton_min.store.wake import WakeBus
    from automaton_min.update.baked import Build

log = get_logger(__name__)

EXIT_UPDATED = 75  # EX_TEMPFAIL: stopped to run the binary just swapped in; the unit's Restart=on-failure starts it


class SchedulerProgress(Progress):
    """The scheduler's sign of life for the watchdog: it is alive while it sleeps on its event, or recently ticked."""

    def __init__(self, scheduler) -> None:
        super().__init__("scheduler")
        self.scheduler = scheduler

    def age(self) -> float:
        return time.monotonic() - self.scheduler.alive_at()


def heartbeat_for(home: Home, config: Config, agent: "Agent", wake_bus: "WakeBus", parts: "PartStates",
                  metrics: "Metrics", now: Clock, schedule_changed: threading.Event | None = None) -> "Scheduler":
    """The run's heartbeat scheduler, not started: the built-in tasks, the metrics report and the relay poll."""
    from automaton_min.heartbeat.context import ContextFactory
    from automaton_min.heartbeat.scheduler import Scheduler
    from automaton_min.heartbeat.tasks import BUILTIN_TASKS
    from automaton_min.heartbeat.report_task import report_metrics
    from automaton_min.heartbeat.social_inbox import check_social_inbox, poll_interval_s
    from automaton_min.heartbeat.update_task import update_task
    from automaton_min.heartbeat.children_task import children_tasks
    from automaton_min.update.baked import this_build

    factory = ContextFactory(home, config, wallet=agent.wallet, now=now, relay=agent.relay, metrics=metrics)
    # Tasks whose part is off are left out: each run writes its schedule row, and SD cards wear.
    tasks = {name: task for name, task in BUILTIN_TASKS.items() if name not in parts.off_tasks()}
    build = this_build()
    extra = {"report_metrics": report_metrics, **({"check_social_inbox": check_social_inbox} if agent.relay else {}),
             "check_for_updates": update_task(build, may_apply=bool(os.environ.get("NOTIFY_SOCKET"))),
             **children_tasks(build)}
    return Scheduler(home, config, db_path(home, config), tasks, factory, wake_bus, now=now, metrics=metrics,
                     extra_tasks=extra, parts=parts, signal=schedule_changed,
                     intervals={"check_social_inbox": poll_interval_s(config) * 1000} if agent.relay else None)


def run_service(home: Home, config: Config, *, now: Clock = system_now) -> int:
    """Start everything, serve until stopped, stop everything in order; the process exit code."""
    from automaton_min.confine.reaper import become_subreaper
    from automaton_min.runtime.sandboxes import launch_spawner

    become_subreaper()  # what a command leaves behind when its spawner dies comes here, to be ended
    spawner = launch_spawner(config, home.root, home.root / "workspace", own_cgroup=True)  # starts as we import
    from automaton_min.observe.metrics import Metrics
    from automaton_min.runtime.agent_runtime import build_agent, start_step
    from automaton_min.heartbeat.parts import PartStates, probe
    from automaton_min.runtime.report import log_banner
    from automaton_min.store.wake import WakeBus
    from automaton_min.net.deadlines import WATCH as http_deadlines
    from automaton_min.update.baked import this_build
    from automaton_min.update.settle import confirm, settle

    signals = Signals(grace_s=float(config.get("shutdownGraceSeconds") or SHUTDOWN_GRACE_S))
    signals.install()
    notifier = Notifier.from_environment()
    metrics = Metrics(now=now)
    schedule_changed = threading.Event()  # the agent's schedule changes and SIGUSR1 wake the scheduler
    loop_progress = Progress("loop")
    try:
        agent = build_agent(home, config, now=now, metrics=metrics, service=True, schedule_changed=schedule_changed,
                            progress=loop_progress.tick, launched=spawner)
    except BaseException:
        if spawner is not None:
            spawner.close()  # not yet the agent's: nothing else would stop it
        raise
    signals.on_abandon.append(agent.sandbox.cancel)
    signals.on_stop.append(http_deadlines.stop)  # a fetch or a relay poll ends now; a model answer, a paid request
    signals.on_abandon.append(http_deadlines.cut_all)  # ... may finish until the grace period runs out

    build = this_build()
    on_trial = settle(agent.db, build, now())  # before the heartbeat: a rollback is known to check_for_updates
    with start_step("remote parts"):
        parts = PartStates.of(config)
        probe(parts, agent.db, now())
    with start_step("heartbeat"):
        scheduler = heartbeat_for(home, config, agent, WakeBus(signals.wake), parts, metrics, now, schedule_changed)
        signals.on_nudge.append(scheduler.poke)
        scheduler.start()

    watchdog = Watchdog.from_environment(notifier, [loop_progress, SchedulerProgress(scheduler)])
    if watchdog is not None:
        if on_trial:  # the new binary is kept once the loop and the heartbeat have both shown progress
            watchdog.after_first_ping = lambda: confirm_on_own_connection(home, config, build, now)
        watchdog.start()
    disk = agent.loop.services.disk
    if disk is not None:
        disk.start()  # room to save turns when a command fills the disk
    log_banner(agent, config, parts)
    notifier.ready()
    if on_trial and watchdog is None:
        confirm(agent.db, build, now())

    def stop_everything() -> None:
        notifier.stopping()
        if not scheduler.stop(timeout_s=10):
            log.warning("a heartbeat task was still running at shutdown; its lease expires on its own")
        if watchdog is not None:
            watchdog.stop()
        if disk is not None:
            disk.release()  # kept only while the agent runs; its room also serves the last checkpoint
        agent.close()
        notifier.close()

    def after_storage_failure() -> None:  # the failed turn could not put its messages back: do it now
        from automaton_min.store.inbox import return_in_flight

        return_in_flight(agent.db)  # the disk failed the turn, not the messages: no try, no crash counted

    code = serve(agent.loop, signals, agent.sleep_until, now=now, on_stop=stop_everything,
                 take_wakes=agent.take_wakes, tick=loop_progress.tick,
                 tick_s=watchdog.tick_every if watchdog is not None else None, status=notifier.status,
                 recover=after_storage_failure, storage=str(db_path(home, config)),
                 release_reserve=disk.release if disk is not None else None)
    return EXIT_UPDATED if code == 0 and swapped_under(build) else code


def swapped_under(build: "Build") -> bool:
    """Another binary lies at this one's path (an update, or an owner's rollback): the exit code asks the unit to
    start it."""
    from automaton_min.update.swap import runs_from

    return build.binary is not None and build.binary.exists() and runs_from(build.binary) is False


def confirm_on_own_connection(home: Home, config: Config, build: "Build", now: Clock) -> None:
    """``confirm`` from the watchdog's thread, which has no connection of its own."""
    from automaton_min.store.db import open_database
    from automaton_min.update.settle import confirm

    db = open_database(db_path(home, config), quick_check=False)
    try:
        confirm(db, build, now())
    finally:
        db.close()

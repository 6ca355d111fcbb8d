"""``check_for_updates`` (every 4 hours, the seed's cadence): under the unit it applies a verified release and asks
for the restart that brings it up; elsewhere it only says one is there (README: Updates)."""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING, Callable

from automaton_min.heartbeat.task_api import TaskContext, TaskFunction, TaskResult

if TYPE_CHECKING:
    from automaton_min.update.baked import Build

UPDATE_MODES = ("apply", "check", "off")


def stop_for_restart() -> None:
    """SIGTERM to this process: the run ends as on any stop, and exits ``EXIT_UPDATED`` so the unit restarts it."""
    os.kill(os.getpid(), signal.SIGTERM)


def update_task(build: "Build", *, may_apply: bool, restart: Callable[[], None] = stop_for_restart) -> TaskFunction:
    """The task for this build; ``may_apply`` when a service manager restarts the agent after a swap."""

    def check_for_updates(ctx: TaskContext) -> TaskResult:
        from automaton_min.update.updater import Updater

        if build.binary is None:
            return TaskResult("not the one-file binary: a source or pip install is updated with pip or git")
        mode = ctx.config.get("updates", "apply")
        url = ctx.config.get("updateManifestUrl") or build.manifest_url
        if mode == "off" or not url:
            return TaskResult("updates are off" if mode == "off" else "no release manifest URL is configured")
        apply = mode == "apply" and may_apply
        outcome = Updater(ctx.db, build, url, now=ctx.now).run(apply=apply)
        if outcome.state == "applied":
            restart()
        return TaskResult(f"{outcome.state}: {outcome.detail}")

    return check_for_updates

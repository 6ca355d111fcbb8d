"""Background jobs: ``exec`` with ``background`` keeps a command running after the call (a server for
``expose_port``); ``stop_job`` ends one. Only the confined spawner keeps jobs (local mode); each job stays
confined and ends when the agent stops. The running jobs are written to KV ``background_jobs`` for ``status``.
"""

from __future__ import annotations

from typing import Any

import orjson

from automaton_min.agent.tools.base import Tool, ToolContext, ToolFailure, ToolSpec
from automaton_min.agent.tools.loop_control import need, object_schema
from automaton_min.errors import RuntimeFailure
from automaton_min.store.kv import set_value

JOBS_KEY = "background_jobs"  # [{"id", "pid", "command", "log", "started_at"}] of the running agent's jobs


def _jobs_of(sandbox: Any) -> Any:
    if not callable(getattr(sandbox, "start_job", None)):
        raise ToolFailure("background jobs run only in local mode, under the confined spawner; "
                          "run the command without background")
    return sandbox


def record_jobs(ctx: ToolContext, jobs: list[dict]) -> None:
    running = [{k: job[k] for k in ("id", "pid", "command", "log", "started_at")} for job in jobs if job.get("running")]
    set_value(ctx.db, JOBS_KEY, orjson.dumps(running).decode(), ctx.now())


def _running_text(jobs: list[dict]) -> str:
    running = [f"{job['id']} ({job['command'][:60]})" for job in jobs if job.get("running")]
    return "running now: " + (", ".join(running) if running else "none")


def start_background(ctx: ToolContext, command: str) -> str:
    sandbox = _jobs_of(need(ctx, "sandbox"))
    try:
        job = sandbox.start_job(command)
    except (OSError, RuntimeFailure) as exc:
        raise ToolFailure(f"the background job could not be started: {getattr(exc, 'strerror', None) or exc}") from None
    jobs = sandbox.jobs()
    record_jobs(ctx, jobs)
    return (f"started background job {job['id']} (pid {job['pid']}); its output goes to {job['log']} in your "
            f"workspace. It runs until you stop it with stop_job or the agent stops; {_running_text(jobs)}")


def run_stop_job(ctx: ToolContext, args: dict[str, Any]) -> str:
    sandbox = _jobs_of(need(ctx, "sandbox"))
    try:
        job = sandbox.stop_job(args["id"])
    except (OSError, RuntimeFailure) as exc:
        raise ToolFailure(f"cannot stop {args['id']}: {getattr(exc, 'strerror', None) or exc}") from None
    jobs = sandbox.jobs()
    record_jobs(ctx, jobs)
    return f"stopped {job['id']} and everything it started; {_running_text(jobs)}"


STOP_JOB = Tool(ToolSpec(
    "stop_job",
    "Stop a background job you started with exec (background: true), with everything it started.",
    object_schema({"id": {"type": "string", "minLength": 1, "maxLength": 40, "description": "The job's id, e.g. job1"}},
                  ["id"]),
    "vm", risk="caution", mutating=True,
), run_stop_job)

"""``check_goal_tasks`` (every 5 minutes): a task given to a child, or running, past its time-out is tried again or
fails, and the agent is woken to see to it (README: Goals). No model call; nothing to do without an active goal."""

from __future__ import annotations

from automaton_min.heartbeat.task_api import TaskContext, TaskResult


def check_goal_tasks(ctx: TaskContext) -> TaskResult:
    from automaton_min.goals.delegate import expire_overdue
    from automaton_min.store.goals import goals, tasks_of

    lines: list[str] = []
    for goal in goals(ctx.db, status="active", limit=10):
        lines += expire_overdue(ctx.db, tasks_of(ctx.db, goal.id), ctx.now(), actor=ctx.wallet_address)
    if not lines:
        return TaskResult("no task overdue")
    return TaskResult("; ".join(lines), wake="Goal tasks timed out: " + "; ".join(lines))

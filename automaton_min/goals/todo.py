"""The todo block: the active goals and their tasks as checklist lines, for every turn's context and for ``get_plan``
(README: Goals). Oldest goals are left out above about ``TOKEN_LIMIT`` tokens (the newest always stays)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from automaton_min.goals.board import ready_tasks
from automaton_min.goals.text import shown
from automaton_min.store.goals import Goal, Task, goals, tasks_of

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

TOKEN_LIMIT = 2_000
TITLE_CHARS = 200
MARKS = {"completed": "x", "running": "~", "assigned": "~"}


def _dollars(cents: int) -> str:
    return f"${cents / 100:.2f}"


def task_line(task: Task, ready: bool) -> str:
    mark = MARKS.get(task.status, " ")
    if task.status == "completed":
        where = f"completed by {task.assigned_to or 'you'}"
    elif task.status in ("running", "assigned"):
        where = f"{task.status}: {task.assigned_to or 'you'}"
    else:
        where = "ready" if ready else task.status
    return f"- [{mark}] {shown(task.title, TITLE_CHARS)} ({where}; id {task.id})"


def plan_lines(db: "Database", goal: Goal) -> list[str]:
    """The goal's heading and one line per task."""
    tasks = tasks_of(db, goal.id)
    ready = {task.id for task in ready_tasks(db, goal.id)}
    budget = sum(task.estimated_cost_cents for task in tasks)
    spent = int(db.scalar("SELECT COALESCE(SUM(actual_cost_cents), 0) FROM task_graph WHERE goal_id = ?",
                          (goal.id,), default=0))
    head = (f"## Goal: {shown(goal.title, TITLE_CHARS)} [{_dollars(budget)} budget, {_dollars(spent)} spent] "
            f"({goal.status}; id {goal.id})")
    lines = [head] + [task_line(task, task.id in ready) for task in tasks]
    return lines if tasks else [head, "- (no tasks yet: plan it)"]


def todo_block(db: "Database") -> str | None:
    """The active goals as checklists, newest kept first when the block would pass ``TOKEN_LIMIT``; None without
    an active goal."""
    active = goals(db, status="active", limit=10)
    if not active:
        return None
    blocks: list[list[str]] = []
    size = 0
    for goal in active:  # newest first
        lines = plan_lines(db, goal)
        tokens = sum(len(line) for line in lines) // 4 + 1
        if blocks and size + tokens > TOKEN_LIMIT:
            break
        blocks.append(lines)
        size += tokens
    return "\n".join(["# Active Goals", *(line for lines in reversed(blocks) for line in lines)])


def next_task(db: "Database") -> Task | None:
    """The active goal's first ready task (by priority, then plan order), or None."""
    active = goals(db, status="active", limit=1)
    ready = ready_tasks(db, active[0].id) if active else []
    return ready[0] if ready else None


def short_todo(db: "Database") -> str | None:
    """The compact mode's form: one line for the active goal, its tasks counted and the next ready one named."""
    active = goals(db, status="active", limit=1)
    if not active:
        return None
    goal, tasks = active[0], tasks_of(db, active[0].id)
    done = sum(task.status == "completed" for task in tasks)
    task = next_task(db)
    after = (f"next: {shown(task.title, TITLE_CHARS)} (id {task.id})" if task else "no task ready" if tasks
             else "no tasks yet: plan it")
    return f"Goal: {shown(goal.title, TITLE_CHARS)} ({done} of {len(tasks)} tasks done; {after})"

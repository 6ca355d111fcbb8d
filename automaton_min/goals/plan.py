"""A goal's plan: a small graph of tasks, checked before any of it is stored (README: Goals): each task has a title,
its dependencies are earlier or later tasks of the same plan by number (never itself, never out of range, never a
cycle), its cost is not negative and its time-out is positive."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from automaton_min.clock import DAY_MS
from automaton_min.errors import UserError
from automaton_min.store.goals import insert_task

MAX_TASKS = 12
DEFAULT_TIMEOUT_MS = 300_000
MAX_TIMEOUT_MS = DAY_MS
MAX_COST_CENTS = 100_000_000  # a million dollars: beyond any task's budget, and within SQLite's integers


class PlanRefused(UserError):
    """The plan is wrong; the message says how, so it can be planned again."""


@dataclass(frozen=True)
class PlannedTask:
    title: str
    description: str | None
    depends_on: tuple[int, ...]  # 1-based numbers of other tasks in the plan
    priority: int
    estimated_cost_cents: int
    timeout_ms: int


def check_plan(items: Any) -> list[PlannedTask]:
    """The plan as tasks, or ``PlanRefused`` naming the first thing wrong."""
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_TASKS:
        raise PlanRefused(f"a plan is a list of 1 to {MAX_TASKS} tasks")
    planned = [_one(n, item, len(items)) for n, item in enumerate(items, 1)]
    _no_cycle(planned)
    return planned


def store_plan(db: Any, goal_id: str, planned: list[PlannedTask], now_ms: int) -> list[str]:
    """The tasks in ``task_graph`` (inside the caller's transaction), dependencies as task ids; their ids."""
    ids = [f"{goal_id}-t{n}" for n in range(1, len(planned) + 1)]
    for task_id, task in zip(ids, planned):
        insert_task(db, goal_id, task.title, task.description, priority=task.priority,
                    dependencies=[ids[d - 1] for d in task.depends_on], estimated_cost_cents=task.estimated_cost_cents,
                    timeout_ms=task.timeout_ms, now_ms=now_ms, task_id=task_id)
    return ids


def _one(n: int, item: Any, count: int) -> PlannedTask:
    where = f"task {n}"
    if not isinstance(item, dict):
        raise PlanRefused(f"{where}: expected an object with a title")
    title = item.get("title")
    if not isinstance(title, str) or not title.strip() or len(title) > 200:
        raise PlanRefused(f"{where}: a title of 1 to 200 characters")
    if not title.isprintable():
        raise PlanRefused(f"{where}: a title is one line of text (no line breaks or control characters)")
    deps = item.get("depends_on", [])
    if not isinstance(deps, list) or not all(type(d) is int for d in deps):
        raise PlanRefused(f"{where}: depends_on is a list of task numbers")
    for dep in deps:
        if dep == n:
            raise PlanRefused(f"{where} depends on itself")
        if not 1 <= dep <= count:
            raise PlanRefused(f"{where} depends on task {dep}, which the plan does not have (1 to {count})")
    cost, timeout, priority = (item.get("estimated_cost_cents", 0), item.get("timeout_ms", DEFAULT_TIMEOUT_MS),
                               item.get("priority", 50))
    if type(cost) is not int or not 0 <= cost <= MAX_COST_CENTS:
        raise PlanRefused(f"{where}: estimated_cost_cents is a whole number from 0 to {MAX_COST_CENTS}")
    if type(timeout) is not int or not 0 < timeout <= MAX_TIMEOUT_MS:
        raise PlanRefused(f"{where}: timeout_ms is a positive whole number up to {MAX_TIMEOUT_MS}")
    if type(priority) is not int or not 0 <= priority <= 100:
        raise PlanRefused(f"{where}: priority is a whole number from 0 to 100")
    description = item.get("description")
    return PlannedTask(title.strip(), description.strip()[:4000] if isinstance(description, str) else None,
                       tuple(dict.fromkeys(deps)), priority, cost, timeout)


def _no_cycle(planned: list[PlannedTask]) -> None:
    state: dict[int, str] = {}

    def visit(n: int, path: tuple[int, ...]) -> None:
        if state.get(n) == "done":
            return
        if state.get(n) == "visiting":
            loop = path[path.index(n):] + (n,)
            raise PlanRefused(f"the plan has a cycle: tasks {' -> '.join(map(str, loop))}")
        state[n] = "visiting"
        for dep in planned[n - 1].depends_on:
            visit(dep, path + (n,))
        state[n] = "done"

    for n in range(1, len(planned) + 1):
        visit(n, ())

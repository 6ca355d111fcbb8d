"""The goals board: one active goal at a time, its tasks, which of them are ready, and what a task's end does to
the rest (README: Goals). Every change is one guarded UPDATE and one ``event_stream`` row in one transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from automaton_min.clock import HOUR_MS
from automaton_min.errors import UserError
from automaton_min.goals.events import record_event
from automaton_min.goals.plan import PlannedTask, store_plan
from automaton_min.store.goals import TASK_DONE, Goal, Task, active_goal_origin, created_since, get_goal, get_task, \
    goals, insert_goal, move_goal, move_task, tasks_of

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

TITLE_LIMIT, TEXT_LIMIT = 200, 4_000
OPEN_TASK = ("pending", "assigned", "running", "blocked")
GOALS_PER_HOUR = 20  # goals set in any hour, counted from the goals; one of the creator's is never refused


class Blocked(UserError):
    """A goal is active already: one at a time (the loop backs off, README: Goals)."""


def room_for_goal(db: "Database", *, origin: str, now_ms: int, set_aside: bool = False) -> None:
    """``Blocked`` while a goal is active; ``UserError`` when ``GOALS_PER_HOUR`` goals were set in the last hour and
    ``origin`` is not the creator. A goal set for an outsider never blocks the agent's or the creator's: it is set
    aside (cancelled, with ``set_aside``, as the new goal is created)."""
    active = goals(db, status="active", limit=1)
    if active and origin in ("agent", "creator") and active_goal_origin(db) == "external":
        if set_aside:
            cancel_goal(db, active[0].id, "set aside for a goal of the agent's own or its creator's",
                        actor="automaton-min", now_ms=now_ms)
        active = []
    if active:
        raise Blocked(f"goal {active[0].title!r} is active; finish its tasks or cancel_goal it first")
    count = created_since(db, now_ms - HOUR_MS)
    if origin != "creator" and count >= GOALS_PER_HOUR:
        raise UserError(f"{count} goals were set in the last hour, the most there may be ({GOALS_PER_HOUR}); plan "
                        "fewer, larger goals and try again within the hour")


def create_goal(db: "Database", title: str, description: str | None, *, strategy: str | None = None,
                deadline: str | None = None, actor: str, now_ms: int, origin: str = "agent",
                plan: list[PlannedTask] | None = None) -> Goal:
    """A new active goal with its checked ``plan`` (both or neither); ``Blocked`` while another is active,
    ``UserError`` for a title like one already active or paused, one too long or not one line, or too many goals this
    hour (``room_for_goal``). ``origin``: the authority that set it (an ``external`` goal spends nothing)."""
    title, description = (title or "").strip(), (description or "").strip() or None
    if not title or len(title) > TITLE_LIMIT or (description and len(description) > TEXT_LIMIT):
        raise UserError(f"title: 1 to {TITLE_LIMIT} characters; description: at most {TEXT_LIMIT}")
    if not title.isprintable():
        raise UserError("title: one line of text (no line breaks or control characters)")
    with db.transaction():
        room_for_goal(db, origin=origin, now_ms=now_ms, set_aside=True)
        lowered = title.lower()
        for other in goals(db, status="paused"):
            if lowered in other.title.lower() or other.title.lower() in lowered:
                raise UserError(f"a goal like this one is paused already: {other.title!r} ({other.id})")
        goal = insert_goal(db, title, description, strategy, deadline, now_ms, origin)
        if plan:
            store_plan(db, goal.id, plan, now_ms)
        record_event(db, "goal_created", actor, f"goal {title!r} created", now_ms, goal_id=goal.id)
    return goal


def cancel_goal(db: "Database", goal_id: str, reason: str, *, actor: str, now_ms: int) -> Goal:
    """The goal failed by choice: its open tasks cancelled."""
    with db.transaction():
        goal = _goal(db, goal_id)
        if not move_goal(db, goal.id, ("active", "paused"), "failed", now_ms):
            raise UserError(f"goal {goal.title!r} has ended ({goal.status}): only an active or paused goal is "
                            "cancelled")
        for task in tasks_of(db, goal.id):
            move_task(db, task.id, OPEN_TASK, "cancelled", now_ms, result=f"goal cancelled: {reason}"[:TEXT_LIMIT])
        record_event(db, "goal_cancelled", actor, f"goal {goal.title!r} cancelled: {reason}", now_ms,
                     goal_id=goal.id)
    return get_goal(db, goal.id)


def ready_tasks(db: "Database", goal_id: str) -> list[Task]:
    """The goal's pending tasks whose dependencies are all completed, by priority (highest first), then plan order."""
    tasks = tasks_of(db, goal_id)
    ready = [task for task in tasks if task.status == "pending" and not _waiting_on(task, tasks)]
    return sorted(ready, key=lambda task: -task.priority)


def waiting_on(db: "Database", task: Task) -> list[Task]:
    """The tasks ``task`` depends on that are not completed yet."""
    return _waiting_on(task, tasks_of(db, task.goal_id))


def _waiting_on(task: Task, tasks: list[Task]) -> list[Task]:
    return [other for other in tasks if other.id in task.dependencies and other.status != "completed"]


def complete_task(db: "Database", task_id: str, result: str, *, actor: str, now_ms: int,
                  quoted: bool = True) -> Task:
    """The task done (once: a second call changes nothing and says so); the goal completes with its last task.
    ``quoted=False``: the event names the actor but not the result (another agent's words stay out of the context's
    notes; ``get_plan`` shows them as that agent's)."""
    with db.transaction():
        task = _task(db, task_id)
        waiting = waiting_on(db, task) if task.status == "pending" else []
        if waiting:
            raise UserError(f"task {task.title!r} waits for {', '.join(repr(t.title) for t in waiting)}; "
                            "complete those first")
        if not move_task(db, task.id, ("pending", "assigned", "running"), "completed", now_ms,
                         result=(result or "")[:TEXT_LIMIT]):
            raise UserError(f"task {task.title!r} is {task.status}; nothing changed")
        said = f": {result[:300]}" if quoted else f" by {actor} (its report: get_plan)"
        record_event(db, "task_completed", actor, f"task {task.title!r} completed{said}", now_ms,
                     goal_id=task.goal_id, task_id=task.id)
        _settle_goal(db, task.goal_id, actor, now_ms)
    return get_task(db, task.id)


def fail_task(db: "Database", task_id: str, why: str, *, actor: str, now_ms: int) -> Task:
    """A try of the task failed: it goes back to pending while retries remain, else it fails, its dependents are
    blocked and the goal fails."""
    with db.transaction():
        task = _task(db, task_id)
        if task.status not in ("pending", "assigned", "running"):
            return task
        if task.retry_count < task.max_retries:
            move_task(db, task.id, (task.status,), "pending", now_ms, retry_count=task.retry_count + 1,
                      assigned_to=None, result=why[:TEXT_LIMIT])
            record_event(db, "task_retried", actor, f"task {task.title!r} failed ({why[:200]}); try "
                         f"{task.retry_count + 2} of {task.max_retries + 1} next", now_ms, goal_id=task.goal_id,
                         task_id=task.id)
            return get_task(db, task.id)
        move_task(db, task.id, (task.status,), "failed", now_ms, result=why[:TEXT_LIMIT])
        record_event(db, "task_failed", actor, f"task {task.title!r} failed for good: {why[:200]}", now_ms,
                     goal_id=task.goal_id, task_id=task.id)
        for blocked in _dependents(db, task):
            move_task(db, blocked.id, ("pending", "assigned"), "blocked", now_ms,
                      result=f"depends on {task.title!r}, which failed")
        _settle_goal(db, task.goal_id, actor, now_ms)
    return get_task(db, task.id)


def _dependents(db: "Database", task: Task) -> list[Task]:
    """Every task that depends on ``task``, directly or through others."""
    tasks = tasks_of(db, task.goal_id)
    found, frontier = [], {task.id}
    while frontier:
        nxt = [t for t in tasks if frontier & set(t.dependencies) and t not in found]
        found += nxt
        frontier = {t.id for t in nxt}
    return found


def _settle_goal(db: "Database", goal_id: str, actor: str, now_ms: int) -> None:
    tasks = tasks_of(db, goal_id)
    if not tasks or any(task.status not in TASK_DONE for task in tasks if task.status != "blocked"):
        return
    goal = get_goal(db, goal_id)
    if all(task.status == "completed" for task in tasks):
        if move_goal(db, goal_id, ("active",), "completed", now_ms):
            record_event(db, "goal_completed", actor, f"goal {goal.title!r} completed", now_ms, goal_id=goal_id)
    elif move_goal(db, goal_id, ("active",), "failed", now_ms):
        record_event(db, "goal_failed", actor, f"goal {goal.title!r} failed: a task failed for good", now_ms,
                     goal_id=goal_id)


def _goal(db: "Database", goal_id: str) -> Goal:
    goal = get_goal(db, goal_id)
    if goal is None:
        raise UserError(f"no goal {goal_id!r}; list_goals shows them")
    return goal


def _task(db: "Database", task_id: str) -> Task:
    task = get_task(db, task_id)
    if task is None:
        raise UserError(f"no task {task_id!r}; get_plan shows a goal's tasks")
    return task

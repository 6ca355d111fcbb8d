"""``goals`` and ``task_graph`` (the reference's columns): what the agent set out to do and the tasks a goal was
planned into (README: Goals). Every change of a goal's or a task's state is one UPDATE guarded by the state it
leaves, so a change happens exactly once however often it is asked for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from automaton_min.clock import to_iso
from automaton_min.ids import new_ulid

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

GOAL_STATES = ("active", "completed", "failed", "paused")
TASK_STATES = ("pending", "assigned", "running", "completed", "failed", "blocked", "cancelled")
TASK_DONE = ("completed", "failed", "cancelled")
ENDED_KEPT = 200  # ended goals kept, with their tasks (retention); active and paused ones always stay

TABLES = f"""
CREATE TABLE IF NOT EXISTS goals (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    description TEXT,
    status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ({", ".join(map(repr, GOAL_STATES))})),
    strategy TEXT,
    expected_revenue_cents INTEGER DEFAULT 0,
    actual_revenue_cents INTEGER DEFAULT 0,
    created_at TEXT NOT NULL,
    deadline TEXT,
    completed_at TEXT
);
CREATE TABLE IF NOT EXISTS goal_origins (
    goal_id TEXT PRIMARY KEY REFERENCES goals(id),
    origin TEXT NOT NULL CHECK (origin IN ('agent', 'creator', 'external'))
);
CREATE TABLE IF NOT EXISTS task_graph (
    id TEXT PRIMARY KEY,
    parent_id TEXT,
    goal_id TEXT NOT NULL REFERENCES goals(id),
    title TEXT NOT NULL,
    description TEXT,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ({", ".join(map(repr, TASK_STATES))})),
    assigned_to TEXT,
    agent_role TEXT,
    priority INTEGER DEFAULT 50,
    dependencies TEXT DEFAULT '[]',
    result TEXT,
    estimated_cost_cents INTEGER DEFAULT 0,
    actual_cost_cents INTEGER DEFAULT 0,
    max_retries INTEGER DEFAULT 3,
    retry_count INTEGER DEFAULT 0,
    timeout_ms INTEGER DEFAULT 300000,
    created_at TEXT NOT NULL,
    started_at TEXT,
    completed_at TEXT
);
CREATE INDEX IF NOT EXISTS idx_task_graph_goal ON task_graph(goal_id);
CREATE INDEX IF NOT EXISTS idx_task_graph_status ON task_graph(status);
CREATE INDEX IF NOT EXISTS idx_task_graph_assigned ON task_graph(assigned_to);
"""


def create_goals(db: "Database") -> None:
    """The tables (a reference database has goals and task_graph from its v9, kept as they are; goal_origins is
    ours: who set each goal)."""
    db.execute(TABLES)


@dataclass(frozen=True)
class Goal:
    id: str
    title: str
    description: str | None
    status: str
    strategy: str | None
    created_at: str
    deadline: str | None
    completed_at: str | None


@dataclass(frozen=True)
class Task:
    id: str
    goal_id: str
    title: str
    description: str | None
    status: str
    assigned_to: str | None
    priority: int
    dependencies: tuple[str, ...]
    result: str | None
    estimated_cost_cents: int
    retry_count: int
    max_retries: int
    timeout_ms: int
    started_at: str | None
    completed_at: str | None


_GOAL = "id, title, description, status, strategy, created_at, deadline, completed_at"
_TASK = ("id, goal_id, title, description, status, assigned_to, priority, dependencies, result, estimated_cost_cents, "
         "retry_count, max_retries, timeout_ms, started_at, completed_at")


def _task(row: tuple) -> Task:
    values = list(row)
    try:
        deps = orjson.loads(values[7] or "[]")
    except orjson.JSONDecodeError:
        deps = []
    values[7] = tuple(str(d) for d in deps) if isinstance(deps, list) else ()
    return Task(*values)


def insert_goal(db: "Database", title: str, description: str | None, strategy: str | None, deadline: str | None,
                now_ms: int, origin: str = "agent") -> Goal:
    """``origin``: the authority of the turn that set it (``agent``, ``creator`` or ``external``)."""
    goal_id = new_ulid(now_ms)
    db.execute("INSERT INTO goals (id, title, description, status, strategy, created_at, deadline) "
               "VALUES (?, ?, ?, 'active', ?, ?, ?)", (goal_id, title, description, strategy, to_iso(now_ms), deadline))
    db.execute("INSERT INTO goal_origins (goal_id, origin) VALUES (?, ?)",
               (goal_id, origin if origin in ("agent", "creator") else "external"))
    return get_goal(db, goal_id)


def active_goal_origin(db: "Database") -> str | None:
    """Who set the active goal (``agent``, ``creator``, ``external``), or None without one."""
    from automaton_min.store.sqlite import table_exists

    if not table_exists(db, "goals"):
        return None
    return db.scalar("SELECT COALESCE(o.origin, 'agent') FROM goals g LEFT JOIN goal_origins o ON o.goal_id = g.id "
                     "WHERE g.status = 'active' ORDER BY g.created_at DESC LIMIT 1")


def goal_origin_of(db: "Database", *, goal_id: object = None, task_id: object = None) -> str | None:
    """Who set the goal named by ``goal_id``, or the goal of ``task_id``; None when neither names one."""
    if not isinstance(goal_id, str) and isinstance(task_id, str):
        goal_id = db.scalar("SELECT goal_id FROM task_graph WHERE id = ?", (task_id,))
    if not isinstance(goal_id, str):
        return None
    return db.scalar("SELECT COALESCE(o.origin, 'agent') FROM goals g LEFT JOIN goal_origins o ON o.goal_id = g.id "
                     "WHERE g.id = ?", (goal_id,))


def get_goal(db: "Database", goal_id: str) -> Goal | None:
    row = db.query_one(f"SELECT {_GOAL} FROM goals WHERE id = ?", (goal_id,))
    return Goal(*row) if row else None


def goals(db: "Database", *, status: str | None = None, limit: int = 50) -> list[Goal]:
    """Goals, newest first (of one status, if given)."""
    where, params = ("WHERE status = ?", (status,)) if status else ("", ())
    return [Goal(*row) for row in db.query(f"SELECT {_GOAL} FROM goals {where} ORDER BY created_at DESC, id DESC "
                                           "LIMIT ?", (*params, limit))]


def insert_task(db: "Database", goal_id: str, title: str, description: str | None, *, priority: int,
                dependencies: list[str], estimated_cost_cents: int, timeout_ms: int, now_ms: int,
                task_id: str | None = None) -> str:
    task_id = task_id or new_ulid(now_ms)
    db.execute("INSERT INTO task_graph (id, goal_id, title, description, status, priority, dependencies, "
               "estimated_cost_cents, timeout_ms, created_at) VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?)",
               (task_id, goal_id, title, description, priority, orjson.dumps(dependencies).decode(),
                estimated_cost_cents, timeout_ms, to_iso(now_ms)))
    return task_id


def tasks_of(db: "Database", goal_id: str) -> list[Task]:
    """A goal's tasks in plan order."""
    return [_task(row) for row in db.query(f"SELECT {_TASK} FROM task_graph WHERE goal_id = ? "
                                           "ORDER BY created_at, length(id), id", (goal_id,))]


def get_task(db: "Database", task_id: str) -> Task | None:
    row = db.query_one(f"SELECT {_TASK} FROM task_graph WHERE id = ?", (task_id,))
    return _task(row) if row else None


def move_goal(db: "Database", goal_id: str, from_states: tuple[str, ...], to_state: str, now_ms: int) -> bool:
    """``to_state`` if the goal is in one of ``from_states``; True when this call changed it."""
    done = to_iso(now_ms) if to_state in ("completed", "failed") else None
    db.execute(f"UPDATE goals SET status = ?, completed_at = COALESCE(?, completed_at) WHERE id = ? AND status IN "
               f"({', '.join('?' * len(from_states))})", (to_state, done, goal_id, *from_states))
    return db.connection.changes() == 1


def move_task(db: "Database", task_id: str, from_states: tuple[str, ...], to_state: str, now_ms: int,
              **columns: Any) -> bool:
    """``to_state`` (with ``columns``: assigned_to, result, retry_count, started_at...) if the task is in one of
    ``from_states``; True when this call changed it."""
    stamps = {"running": "started_at", "completed": "completed_at", "failed": "completed_at",
              "cancelled": "completed_at"}
    if to_state in stamps and stamps[to_state] not in columns:
        columns[stamps[to_state]] = to_iso(now_ms)
    sets = ", ".join(f"{name} = ?" for name in ("status", *columns))
    db.execute(f"UPDATE task_graph SET {sets} WHERE id = ? AND status IN ({', '.join('?' * len(from_states))})",
               (to_state, *columns.values(), task_id, *from_states))
    return db.connection.changes() == 1


def created_since(db: "Database", since_ms: int) -> int:
    """Goals set at or after ``since_ms``, whatever became of them."""
    return int(db.scalar("SELECT COUNT(*) FROM goals WHERE created_at >= ?", (to_iso(since_ms),), default=0))


def prune_ended(db: "Database", keep: int = ENDED_KEPT, batch: int = 500) -> int:
    """Retention: one batch of the oldest ended goals beyond the newest ``keep``, deleted with their tasks; how many
    goals went."""
    excess = int(db.scalar("SELECT COUNT(*) FROM goals WHERE status IN ('completed', 'failed')", default=0)) - keep
    if excess <= 0:
        return 0
    with db.transaction():
        old = orjson.dumps([row[0] for row in db.query(
            "SELECT id FROM goals WHERE status IN ('completed', 'failed') ORDER BY created_at, id LIMIT ?",
            (min(batch, excess),))]).decode()
        for table in ("task_graph", "goal_origins", "goals"):
            column = "id" if table == "goals" else "goal_id"
            db.execute(f"DELETE FROM {table} WHERE {column} IN (SELECT value FROM json_each(?))", (old,))
        return db.connection.changes()


def active_progress(db: "Database") -> dict[str, Any] | None:
    """The active goal and its tasks by state (for ``status`` and ``system_synopsis``); None without one."""
    from automaton_min.store.sqlite import table_exists

    if not table_exists(db, "goals"):  # a read-only open of a database older than the table
        return None
    row = db.query_one("SELECT id, title, created_at FROM goals WHERE status = 'active' "
                       "ORDER BY created_at DESC, id DESC LIMIT 1")
    if row is None:
        return None
    states = dict(db.query("SELECT status, COUNT(*) FROM task_graph WHERE goal_id = ? GROUP BY status", (row[0],)))
    return {"id": row[0], "title": row[1], "createdAt": row[2], "tasks": states,
            "done": states.get("completed", 0), "total": sum(states.values())}


def progress_line(progress: dict[str, Any] | None) -> str:
    """``'Sell a poem': 1 of 3 tasks done`` or ``none``."""
    if progress is None:
        return "none"
    return f"{progress['title']!r}: {progress['done']} of {progress['total']} tasks done"

"""Procedural memory (``procedural_memory``): named step-by-step procedures with success and failure counts.

Steps are stored as the reference's JSON list of objects; each needs a ``description`` (or the memory document's
``action``), the rest (``order``, ``tool``, ``argsTemplate``, ``expectedOutcome``, ``onFailure``) is kept as given.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from automaton_min.clock import Clock, to_iso
from automaton_min.ids import new_ulid
from automaton_min.memory.common import MemoryStoreError, Ranked, prune_to, ranked_search, text

if TYPE_CHECKING:
    from automaton_min.store.db import Database

MAX_STEPS = 50
_COLUMNS = ("t.id, t.name, t.description, t.steps, t.success_count, t.failure_count, t.last_used_at, t.created_at,"
            " t.updated_at")


@dataclass(frozen=True)
class Procedure:
    id: str
    name: str
    description: str
    steps: list[dict[str, Any]]
    success_count: int
    failure_count: int
    last_used_at: str | None
    created_at: str
    updated_at: str

    @property
    def times_executed(self) -> int:
        return self.success_count + self.failure_count

    @property
    def success_rate(self) -> float | None:
        """Successes over executions; ``None`` before the first execution."""
        return self.success_count / self.times_executed if self.times_executed else None

    @property
    def smoothed_success_rate(self) -> float:
        """``(s + 1) / (s + f + 2)``: 0.5 for an untried procedure, moving toward the real rate with use."""
        return (self.success_count + 1) / (self.times_executed + 2)


def _procedure(row: tuple) -> Procedure:
    try:
        steps = json.loads(row[3])
    except ValueError:
        steps = []
    return Procedure(row[0], row[1], row[2], steps if isinstance(steps, list) else [], *row[4:])


def _check_steps(steps: Sequence[dict[str, Any]]) -> str:
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence) or not steps:
        raise MemoryStoreError("steps: expected a non-empty list of steps")
    if len(steps) > MAX_STEPS:
        raise MemoryStoreError(f"steps: at most {MAX_STEPS}, got {len(steps)}")
    for number, step in enumerate(steps, 1):
        if not isinstance(step, dict):
            raise MemoryStoreError(f"steps[{number}]: expected an object")
        described = step.get("description", step.get("action"))
        if not isinstance(described, str) or not described.strip():
            raise MemoryStoreError(f"steps[{number}]: needs a description")
    encoded = json.dumps(list(steps), ensure_ascii=False)
    text("steps", encoded)
    return encoded


class ProceduralMemory:
    """Save, read, search, score and prune procedures.

    Bound: at most ``max_rows``; retention drops the lowest smoothed success rate, least recently used first.
    """

    HALF_LIFE_DAYS = 60.0

    def __init__(self, db: "Database", now: Clock, *, max_rows: int = 500) -> None:
        self.db, self.now, self.max_rows = db, now, max_rows

    def save(self, name: str, description: str, steps: Sequence[dict[str, Any]]) -> Procedure:
        """Create a procedure, or replace the description and steps of the one with this name (counts kept)."""
        text("name", name, limit=200)
        text("description", description)
        encoded = _check_steps(steps)
        now = self.now()
        self.db.execute(
            "INSERT INTO procedural_memory (id, name, description, steps, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET description = excluded.description,"
            " steps = excluded.steps, updated_at = excluded.updated_at",
            (new_ulid(now), name, description, encoded, to_iso(now), to_iso(now)),
        )
        return self.get(name)  # type: ignore[return-value]

    def get(self, name: str) -> Procedure | None:
        row = self.db.query_one(f"SELECT {_COLUMNS} FROM procedural_memory t WHERE t.name = ?", (name,))
        return _procedure(row) if row else None

    def get_by_id(self, procedure_id: str) -> Procedure | None:
        row = self.db.query_one(f"SELECT {_COLUMNS} FROM procedural_memory t WHERE t.id = ?", (procedure_id,))
        return _procedure(row) if row else None

    def update(self, name: str, *, description: str | None = None,
               steps: Sequence[dict[str, Any]] | None = None) -> Procedure:
        procedure = self.get(name)
        if procedure is None:
            raise MemoryStoreError(f"procedure {name!r}: not found")
        return self.save(name, procedure.description if description is None else description,
                         procedure.steps if steps is None else steps)

    def record_outcome(self, name: str, success: bool) -> Procedure:
        """Count one execution of ``name`` as a success or a failure."""
        column = "success_count" if success else "failure_count"
        stamp = to_iso(self.now())
        self.db.execute(
            f"UPDATE procedural_memory SET {column} = {column} + 1, last_used_at = ?, updated_at = ? WHERE name = ?",
            (stamp, stamp, name),
        )
        if self.db.connection.changes() == 0:
            raise MemoryStoreError(f"procedure {name!r}: not found")
        return self.get(name)  # type: ignore[return-value]

    def delete(self, name: str) -> bool:
        self.db.execute("DELETE FROM procedural_memory WHERE name = ?", (name,))
        return self.db.connection.changes() > 0

    def search(self, query: str, *, min_success_rate: float | None = None,
               limit: int = 5) -> list[Ranked[Procedure]]:
        """Procedures matching ``query``, ranked (quality = smoothed success rate, half-life 60 days of last use).

        ``min_success_rate`` drops procedures that were executed and succeed less often than that.
        """
        where, params = "", []
        if min_success_rate is not None:
            where = ("t.success_count + t.failure_count = 0"
                     " OR t.success_count * 1.0 / (t.success_count + t.failure_count) >= ?")
            params.append(float(min_success_rate))
        return ranked_search(
            self.db, table="procedural_memory", select=_COLUMNS, query=query, weights=(2.0, 1.0, 0.5), limit=limit,
            now_ms=self.now(), half_life_days=self.HALF_LIFE_DAYS, build=_procedure,
            quality=lambda p: p.smoothed_success_rate, stamp=lambda p: p.last_used_at or p.updated_at,
            where=where, params=params,
        )

    def prune(self) -> int:
        """Keep at most ``max_rows`` procedures."""
        return prune_to(
            self.db, "procedural_memory", keep=self.max_rows,
            order="(success_count + 1.0) / (success_count + failure_count + 2) ASC,"
                  " COALESCE(last_used_at, updated_at) ASC",
        )

"""A child's lifecycle: moving along the one table of allowed steps (``store.children.NEXT``), each step recorded
in ``child_lifecycle_events`` in the same transaction that sets ``children.status``, so a restarted parent resumes
from the last step written."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from automaton_min.clock import to_iso
from automaton_min.crashpoint import crash_point
from automaton_min.errors import RuntimeFailure
from automaton_min.store.children import NEXT, Child, get_child, insert_event

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

SETTABLE = frozenset({"address", "sandbox_id", "funded_amount_cents", "last_checked"})


class BadTransition(RuntimeFailure):
    """A step the lifecycle does not allow from the child's current state."""


def request(db: "Database", child_id: str, name: str, genesis_prompt: str, creator_message: str | None,
            now_ms: int) -> Child:
    """The child's row and its first step, ``requested``; a second call with the same id returns the child as it is
    (a parent killed after this step resumes, never asks twice)."""
    with db.transaction():
        if (existing := get_child(db, child_id)) is not None:
            return existing
        # '' until known: a table made by the reference holds address and sandbox_id NOT NULL
        db.execute("INSERT INTO children (id, name, address, sandbox_id, genesis_prompt, creator_message, status, "
                   "created_at) VALUES (?, ?, '', '', ?, ?, 'requested', ?)",
                   (child_id, name, genesis_prompt, creator_message, to_iso(now_ms)))
        insert_event(db, child_id, None, "requested", "the parent asked for this child", {}, now_ms)
    crash_point("child.requested")
    return get_child(db, child_id)


def transition(db: "Database", child_id: str, to_state: str, reason: str, now_ms: int, *,
               metadata: dict[str, Any] | None = None, **columns: Any) -> bool:
    """Move the child to ``to_state`` (with ``columns`` of its row, e.g. ``sandbox_id``), recording why; False when
    it is there already (a step repeated after a restart), ``BadTransition`` when the table does not allow it."""
    with db.transaction():
        child = get_child(db, child_id)
        if child is None:
            raise BadTransition(f"no child {child_id}")
        if child.status == to_state:
            return False
        if to_state not in NEXT.get(child.status, ()):
            raise BadTransition(f"child {child.name} cannot go from {child.status} to {to_state}")
        unknown = set(columns) - SETTABLE
        if unknown:
            raise ValueError(f"not a child column a step sets: {sorted(unknown)}")
        sets = ", ".join(f"{name} = ?" for name in ("status", *columns))
        db.execute(f"UPDATE children SET {sets} WHERE id = ?", (to_state, *columns.values(), child_id))
        insert_event(db, child_id, child.status, to_state, reason, metadata or {}, now_ms)
    return True


def events(db: "Database", child_id: str) -> list[tuple[str | None, str, str]]:
    """(from, to, reason) of every step, oldest first."""
    return [tuple(row) for row in db.query("SELECT from_state, to_state, reason FROM child_lifecycle_events "
                                           "WHERE child_id = ? ORDER BY created_at, id", (child_id,))]

"""Spawning a child, one lifecycle step at a time (README: Children). Each step first looks at what an earlier,
killed run may have done (a sandbox named after the child), so a restarted parent never creates a second sandbox."""

from __future__ import annotations

from typing import TYPE_CHECKING

from automaton_min.children.lifecycle import transition
from automaton_min.crashpoint import crash_point
from automaton_min.store.children import Child, get_child

if TYPE_CHECKING:
    from automaton_min.conway.client import ConwayClient
    from automaton_min.store.sqlite import Database

SANDBOX_PREFIX = "automaton-child-"


def sandbox_name(child_id: str) -> str:
    """The sandbox's name: it carries the child's id, so the parent finds it again after a restart."""
    return SANDBOX_PREFIX + child_id.lower()


def ensure_sandbox(db: "Database", client: "ConwayClient", child: Child, *, memory_mb: int, now_ms: int) -> Child:
    """Step ``sandbox_created``: the child's sandbox, found by its name or created, recorded with the child."""
    if child.sandbox_id:
        return child
    name = sandbox_name(child.id)
    found = next((sandbox for sandbox in client.list_sandboxes() if sandbox.name == name), None)
    if found is None:
        found = client.create_sandbox(name, memory_mb=memory_mb)
        crash_point("child.sandbox_created")  # created, not yet recorded: the restart finds it by name
    transition(db, child.id, "sandbox_created", f"sandbox {found.id} ({name})", now_ms, sandbox_id=found.id)
    return get_child(db, child.id)

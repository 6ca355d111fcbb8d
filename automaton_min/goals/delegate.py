"""Tasks given to children and tasks that take too long (README: Goals). A child is given a task by a signed relay
message naming the try (``task done <id> try <n>: <what came of it>``); only a message signed by that child's wallet
and naming the current try completes it. A report naming no try (a child on an older release) counts only if it was
signed at or after the current try was given. A task assigned or running past its time-out is tried again, or fails."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from automaton_min.clock import from_iso, to_iso
from automaton_min.errors import UserError
from automaton_min.goals.board import complete_task, fail_task
from automaton_min.goals.events import record_event
from automaton_min.store.goals import Task, get_task, move_task
from automaton_min.store.inbox import mark_taken

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

REFUSED_PER_TASK = 10  # refused reports recorded per task (the stream keeps 2,000 events in all)
REPORT = re.compile(r"\btask done ([A-Za-z0-9_-]{1,100})(?:[ ,(]+try #?(\d{1,6})\)?)?\s*:\s*(.*)",
                    re.IGNORECASE | re.DOTALL)


def try_number(task: Task) -> int:
    """The try a task is on: 1, then one more each time it is tried again."""
    return task.retry_count + 1


def assignment_text(task: Task) -> str:
    """The message a child is given a task by, saying how to report this try of it done."""
    about = f"\n{task.description}" if task.description else ""
    return (f"A task for you: {task.title}{about}\nWhen it is done, answer me with exactly: task done {task.id} try "
            f"{try_number(task)}: <what came of it>")


def assign(db: "Database", task_id: str, child_address: str, *, actor: str, now_ms: int) -> bool:
    """The task, pending, now assigned to the child (its time-out counts from now); False when it was not pending."""
    with db.transaction():
        task = get_task(db, task_id)
        if task is None or not move_task(db, task.id, ("pending",), "assigned", now_ms,
                                         assigned_to=child_address.lower(), started_at=to_iso(now_ms)):
            return False
        record_event(db, "task_assigned", actor, f"task {task.title!r} (try {try_number(task)}) given to "
                     f"{child_address}", now_ms, goal_id=task.goal_id, task_id=task.id)
    return True


def take_report(db: "Database", message_id: str, signer: str | None, content: str, now_ms: int, *,
                signed_at: str | None = None) -> str | None:
    """A verified message that reports a task done: completes it if its signer is the task's assignee and it
    answers the current try (``signed_at``: when the intake verified it was signed), the message taken with it (no
    turn reads it: a child's report is not an outsider's order to answer); a line on what happened, or None when
    the message reports no known task."""
    found = REPORT.search(content or "")
    with db.transaction():  # read and completed together: the agent or the owner may end the task meanwhile
        task = get_task(db, found.group(1)) if found else None
        if task is None:
            return None
        why = _not_this_try(task, signer, found.group(2), signed_at)
        if why:
            if _refusals(db, task.id) < REFUSED_PER_TASK:  # anyone can send them: they never crowd out the rest
                record_event(db, "task_report_refused", signer or "unsigned",
                             f"a report that task {task.title!r} is done, {why}: ignored", now_ms,
                             goal_id=task.goal_id, task_id=task.id)
            return f"task {task.id}: a report {why} was ignored"
        try:
            complete_task(db, task.id, found.group(3).strip()[:4000] or "done", actor=signer.lower(), now_ms=now_ms,
                          quoted=False)
            mark_taken(db, message_id, now_ms)
        except UserError as exc:  # the task cannot be completed as it stands: this report only, not the poll's rest
            return f"task {task.id}: a report was not taken ({exc})"
    return f"task {task.id} completed by {signer.lower()}"


def _not_this_try(task: Task, signer: str | None, named: str | None, signed_at: str | None) -> str | None:
    """Why a report does not answer the task's current try, or None when it does."""
    if not signer or task.assigned_to != signer.lower():
        return "not from its assignee"
    if task.status not in ("assigned", "running") or not task.started_at:
        return "for a try that is over"
    current = try_number(task)
    if named is not None:
        return None if int(named) == current else f"for try {int(named)} (the current try is {current})"
    try:
        signed = from_iso(signed_at) if signed_at else None
    except ValueError:
        signed = None
    if signed is None or signed < from_iso(task.started_at):
        return "naming no try and signed before the current try was given"
    return None


def _refusals(db: "Database", task_id: str) -> int:
    return int(db.scalar("SELECT COUNT(*) FROM event_stream WHERE type = 'task_report_refused' AND task_id = ?",
                         (task_id,), default=0))


def expire_overdue(db: "Database", tasks: list[Task], now_ms: int, *, actor: str) -> list[str]:
    """Each of ``tasks`` assigned or running past its time-out: tried again (pending, unassigned) or failed."""
    lines = []
    for task in tasks:
        if task.status not in ("assigned", "running") or not task.started_at:
            continue
        if from_iso(task.started_at) + task.timeout_ms > now_ms:
            continue
        after = fail_task(db, task.id, f"timed out after {task.timeout_ms // 1000} s", actor=actor, now_ms=now_ms)
        lines.append(f"task {task.title!r} timed out: {after.status}")
    return lines


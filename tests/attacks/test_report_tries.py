"""A child's report answers one try of a task (issue 32's attacker: a late report for a try that timed out completed
the next try given to the same child). Through the real parts: the parent's agent gives the task by its tool over
the loopback relay, the heartbeat's check_goal_tasks times it out, and the child's reports, signed by its key (with
eth-account), come in through the relay poll, the intake and the social inbox task, on the agent's state.db."""

from __future__ import annotations

import pytest

from attack_kit import finish, stored_calls, turn
from attack_kit import model, relay  # noqa: F401 (fixtures)
from automaton_min.config import load_config
from automaton_min.goals.board import create_goal
from automaton_min.goals.plan import check_plan
from automaton_min.heartbeat.goals_task import check_goal_tasks
from automaton_min.heartbeat.social_inbox import check_social_inbox
from automaton_min.heartbeat.task_api import TaskContext
from automaton_min.store.goals import get_task, tasks_of
from test_goals import CHILD_KEY, a_healthy_child as a_child

PLAN = [{"title": "Count the stars", "timeout_ms": 60_000}, {"title": "Publish the count", "depends_on": [1]}]


def give(agent, model, relay, task_id: str, child: str) -> str:
    """The agent's own turn gives the task to the child (assign_task); the message the child got."""
    model.script(turn(("assign_task", {"task_id": task_id, "child_id": "kid1"})), finish())
    agent.loop.run_cycle("work")
    assert stored_calls(agent.db, "assign_task")[-1][3] is None, stored_calls(agent.db, "assign_task")
    return [m["content"] for m in relay.log if m["to"] == child.lower()][-1]


def poll(agent):
    home = agent.loop.services.home
    return check_social_inbox(TaskContext(agent.db, load_config(home, {}), home, agent.now, "normal",
                                          agent.wallet.address, relay=agent.relay))


def report(agent, relay, child: str, text: str, signed_at_ms: int | None = None) -> None:
    relay.inject(relay.signed_message(CHILD_KEY, child, agent.wallet.address, text, signed_at_ms=signed_at_ms))


@pytest.fixture
def second_try(agent_for, model, relay, clock):
    """A task given to the child, timed out, and given to the same child again: (agent, child, task id, when the
    second try was given)."""
    agent = agent_for(socialRelayUrl=relay.url)
    child = a_child(agent.db, clock)
    goal = create_goal(agent.db, "Publish a star count", None, actor="test", now_ms=clock(), plan=check_plan(PLAN))
    first = tasks_of(agent.db, goal.id)[0].id
    assert give(agent, model, relay, first, child).endswith(f"task done {first} try 1: <what came of it>")
    clock.advance(60_001)
    timed_out = check_goal_tasks(TaskContext(agent.db, None, None, clock, "normal", agent.wallet.address))
    assert "timed out: pending" in timed_out.summary
    clock.advance(1_000)
    given_at = clock()
    assert give(agent, model, relay, first, child).endswith(f"task done {first} try 2: <what came of it>")
    clock.advance(5_000)
    return agent, child, first, given_at


def test_a_late_report_for_an_old_try_leaves_the_new_try_assigned(second_try, relay):
    agent, child, task_id, _ = second_try
    report(agent, relay, child, f"task done {task_id} try 1: 4,000 stars (last night's count)")  # signed just now
    outcome = poll(agent)
    assert f"task {task_id}: a report for try 1 (the current try is 2) was ignored" in outcome.summary
    task = get_task(agent.db, task_id)
    assert (task.status, task.assigned_to, task.retry_count) == ("assigned", child.lower(), 1)

    report(agent, relay, child, f"task done {task_id} try 2: 4,100 stars")
    assert f"task {task_id} completed by {child.lower()}" in poll(agent).summary
    assert get_task(agent.db, task_id).status == "completed" and get_task(agent.db, task_id).result == "4,100 stars"


@pytest.mark.parametrize("signed", ["before", "after"])
def test_a_report_naming_no_try_counts_only_when_signed_after_the_try_was_given(second_try, relay, signed):
    """A child on an older release names no try: its report is judged by the time it was signed, which the intake
    verified."""
    agent, child, task_id, given_at = second_try
    signed_at_ms = given_at - 1 if signed == "before" else given_at + 1_000
    report(agent, relay, child, f"task done {task_id}: 4,000 stars", signed_at_ms=signed_at_ms)
    outcome = poll(agent)
    task = get_task(agent.db, task_id)
    if signed == "before":
        assert "naming no try and signed before the current try was given was ignored" in outcome.summary
        assert (task.status, task.assigned_to) == ("assigned", child.lower())
    else:
        assert f"task {task_id} completed by {child.lower()}" in outcome.summary
        assert (task.status, task.result) == ("completed", "4,000 stars")

"""Floods through the agent's own tools (issue 32's attacker: thousands of goals, tasks and spawn requests): each
call runs as the loop runs it (validated, authorized by the policy, run; ten to a turn) on the agent's state.db, and
each is refused by a named limit or held, and what grows is pruned."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from attack_kit import model  # noqa: F401 (fixtures)
from automaton_min.agent.controls import MAX_TOOL_CALLS_PER_TURN
from automaton_min.goals.board import GOALS_PER_HOUR
from automaton_min.goals.plan import MAX_TASKS
from automaton_min.store.goals import ENDED_KEPT

HOUR_MS = 3_600_000


def run_tools(agent, calls: list[tuple[str, dict]], *, authority: str = "agent") -> list:
    """Each ``(name, arguments)`` as the loop runs a tool call, ten to a turn; their outcomes."""
    from automaton_min.agent.loop import LoopState
    from automaton_min.agent.tools.base import ToolContext
    from automaton_min.ids import new_ulid

    loop, outcomes = agent.loop, []
    for start in range(0, len(calls), MAX_TOOL_CALLS_PER_TURN):
        turn_id = new_ulid(agent.now())
        ctx = ToolContext(agent.db, loop.config, agent.now, turn_id, authority, loop.services.for_turn(LoopState()))
        names: tuple[str, ...] = ()
        for index, (name, args) in enumerate(calls[start:start + MAX_TOOL_CALLS_PER_TURN]):
            outcomes.append(loop.tools.execute(
                replace(ctx, call_index=index), f"call_{index}", name, args,
                authorize=lambda spec, a, n=names: loop.hooks.authorize(spec, a, authority, turn_id, n)))
            names += (name,)
    return outcomes


def plan(n: int) -> list[dict]:
    return [{"title": f"step {i}"} for i in range(1, n + 1)]


def count(db, table: str, where: str = "1") -> int:
    return int(db.scalar(f"SELECT COUNT(*) FROM {table} WHERE {where}"))


def active_goal(db) -> str | None:
    return db.scalar("SELECT id FROM goals WHERE status = 'active'")


def test_a_plan_of_thousands_of_tasks_is_refused_whole(agent_for, model):
    agent = agent_for()
    [huge] = run_tools(agent, [("create_goal", {"title": "Everything", "tasks": plan(5_000)})])
    assert f"tasks: expected at most {MAX_TASKS} items" in (huge.error or ""), huge
    [most] = run_tools(agent, [("create_goal", {"title": "Twelve", "tasks": plan(MAX_TASKS)})])
    assert most.ok and count(agent.db, "task_graph") == MAX_TASKS and count(agent.db, "goals") == 1


def test_create_goal_floods_are_held_one_at_a_time_and_limited_each_hour(agent_for, model, clock):
    agent = agent_for()
    outcomes = run_tools(agent, [("create_goal", {"title": f"Goal {n}", "tasks": plan(MAX_TASKS)})
                                 for n in range(1_000)])
    assert sum(o.ok and o.result.startswith("Goal ") for o in outcomes) == 1
    assert all(o.result.startswith("BLOCKED") for o in outcomes[1:]), outcomes[1]
    assert count(agent.db, "goals") == 1

    refused = []
    for n in range(500):  # the flood that ends each goal to make room for the next
        cancel, create = run_tools(agent, [("cancel_goal", {"goal_id": active_goal(agent.db) or "none"}),
                                           ("create_goal", {"title": f"Again {n}", "tasks": plan(MAX_TASKS)})])
        refused += [create.error] if create.error else []
    assert count(agent.db, "goals") == GOALS_PER_HOUR and count(agent.db, "task_graph") == GOALS_PER_HOUR * MAX_TASKS
    assert len(refused) == 500 - (GOALS_PER_HOUR - 1)
    assert f"the most there may be ({GOALS_PER_HOUR})" in refused[-1]

    [owner] = run_tools(agent, [("create_goal", {"title": "The owner's", "tasks": plan(1)})], authority="creator")
    assert owner.ok, owner  # the agent's flood never locks its creator out
    run_tools(agent, [("cancel_goal", {"goal_id": active_goal(agent.db)})])
    clock.advance(HOUR_MS + 1)
    [later] = run_tools(agent, [("create_goal", {"title": "Next hour", "tasks": plan(1)})])
    assert later.ok, later


def test_ended_goals_are_kept_to_the_newest_with_their_tasks(agent_for, model, clock):
    from automaton_min.config import load_config
    from automaton_min.heartbeat.retention import prune_all

    agent = agent_for()
    made = ENDED_KEPT + 60
    for n in range(made):
        run_tools(agent, [("create_goal", {"title": f"Goal {n}", "tasks": plan(MAX_TASKS)})])
        run_tools(agent, [("cancel_goal", {"goal_id": active_goal(agent.db)})])
        clock.advance(HOUR_MS // GOALS_PER_HOUR + 1)
    run_tools(agent, [("create_goal", {"title": "Still going", "tasks": plan(2)})])
    assert count(agent.db, "goals") == made + 1

    removed = prune_all(agent.db, load_config(agent.loop.services.home, {}), clock())
    assert removed.get("goals") == 60
    assert count(agent.db, "goals", "status = 'failed'") == ENDED_KEPT and active_goal(agent.db)
    assert count(agent.db, "task_graph") == ENDED_KEPT * MAX_TASKS + 2
    assert count(agent.db, "goal_origins") == ENDED_KEPT + 1
    assert agent.db.scalar("SELECT MIN(title) FROM goals WHERE title LIKE 'Goal 6_'") == "Goal 60"  # the oldest went
    assert prune_all(agent.db, load_config(agent.loop.services.home, {}), clock()).get("goals") is None


def test_complete_task_floods_complete_each_task_once(agent_for, model):
    agent = agent_for()
    run_tools(agent, [("create_goal", {"title": "Twelve steps", "tasks": plan(MAX_TASKS)})])
    goal = active_goal(agent.db)
    ids = [f"{goal}-t{n}" for n in range(1, MAX_TASKS + 1)]
    flood = [("complete_task", {"task_id": ids[n % MAX_TASKS] if n % 5 else f"{goal}-t{n + 100}", "result": "done"})
             for n in range(3_000)]
    outcomes = run_tools(agent, flood)
    assert sum(o.ok for o in outcomes) == MAX_TASKS
    assert all("nothing changed" in o.error or "no task" in o.error for o in outcomes if not o.ok)
    kinds = dict(agent.db.query("SELECT type, COUNT(*) FROM event_stream GROUP BY type"))
    assert kinds == {"goal_created": 1, "task_completed": MAX_TASKS, "goal_completed": 1}


def spawning_sandbox(conway) -> None:
    """Sandboxes that answer the spawn's commands as real ones would, each child with a wallet of its own."""
    made = iter(range(1, 10_000))

    def run(command, timeout):
        if "uname -m" in command:
            return {"stdout": os.uname().machine + "\n", "stderr": "", "exit_code": 0}
        if "sha256sum -c" in command:
            return {"stdout": "automaton-min 0.9.0\n", "stderr": "", "exit_code": 0}
        if command.endswith("init"):
            return {"stdout": json.dumps({"address": f"0x{next(made):040x}"}), "stderr": "", "exit_code": 0}
        return {"stdout": "", "stderr": "", "exit_code": 0}

    conway.exec_handler = run


@pytest.fixture
def conway():
    from standins.conway_api import ConwayApi

    with ConwayApi(balance_cents=100_000) as api:
        yield api


def test_spawn_child_floods_begin_at_most_three_children_a_day(agent_for, model, conway, clock):
    from automaton_min.update.baked import Build
    from standins.releases import TEST_PUBLIC_KEY, ReleaseServer, manifest, script_binary

    arch = f"linux-{os.uname().machine}"
    with ReleaseServer() as releases:
        releases.publish(manifest("0.9.0", {arch: script_binary("0.9.0")}, clock()), {arch: script_binary("0.9.0")})
        agent = agent_for(conwayApiUrl=conway.url, conwayApiKey=conway.api_key, updateManifestUrl=releases.manifest_url,
                          release=Build(None, TEST_PUBLIC_KEY, "0.9.0", releases.manifest_url, arch))
        spawning_sandbox(conway)
        flood = [("spawn_child", {"name": f"kid{n}", "genesis_prompt": "Count the stars."}) for n in range(1_000)]
        first = run_tools(agent, flood)
        clock.advance(25 * HOUR_MS)
        second = run_tools(agent, flood)
    creates = [r for r in conway.requests if r.method == "POST" and r.path == "/v1/sandboxes"]
    assert len(creates) == 3 and count(agent.db, "children") == 3
    assert sum(o.ok for o in first) == 3 and sum(o.ok for o in second) == 0
    assert all(o.error.startswith("blocked by policy: RATE_LIMIT_SPAWN") for o in first[3:])  # 3 a day
    living = "not spawned: you have 3 living children and maxChildren is 3; prune_dead_children or wait"
    assert {o.error.split(":")[1].strip() if o.error.startswith("blocked") else o.error for o in second} == {
        living, "RATE_LIMIT_TOOL"}  # the day after: maxChildren, and a dangerous tool's 60 calls an hour

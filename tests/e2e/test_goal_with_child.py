"""A goal done by the agent and its child through the real agent (README: Goals, Children): the parent plans three
tasks with one dependency, does two itself, gives one to a real child process in the Conway stand-in's directory
sandbox, whose own model reports it done over the loopback relay; the todo block shows the progress each turn, and
the goal completes."""

from __future__ import annotations

import json
import re

from automaton_min.config import load_config
from automaton_min.heartbeat.social_inbox import check_social_inbox
from automaton_min.heartbeat.task_api import TaskContext
from automaton_min.store.children import list_children
from automaton_min.store.goals import get_goal, get_task
from standins.model_servers import openai_answer
from test_children import a_parent, agent_clock, call, children_to_stop, cloud, model, wait_for  # noqa: F401

PLAN = [{"title": "Write the poem"}, {"title": "Check the rhymes"},
        {"title": "Publish it", "depends_on": [1, 2]}]


def child_reports(parent_address: str):
    """The child's model: a task from its parent is reported done as the message says (naming its try), once;
    otherwise it sleeps."""
    def answer(body: dict) -> dict:
        said = json.dumps(body.get("messages", []))
        given = re.findall(r"(task done [A-Za-z0-9_-]+ try \d+): <what came of it>", said)
        if given and f"{given[-1]}: rhymes checked" not in said:
            return openai_answer(None, [call("send_message", to_address=parent_address,
                                             content=f"{given[-1]}: rhymes checked")])
        return openai_answer("resting", [call("sleep", duration_seconds=3600, reason="nothing to do")])
    return answer


def test_a_goal_is_done_by_the_agent_and_a_real_child(agent_for, model, cloud, children_to_stop):
    with a_parent(agent_for, cloud) as (parent, relay, _):
        model.script(openai_answer(None, [call("spawn_child", name="kid", genesis_prompt="Check rhymes.")]),
                     openai_answer("Spawned."))
        parent.loop.run_cycle("work")
        [child] = list_children(parent.db)
        model.script(openai_answer(None, [call("fund_child", child_id=child.id, amount_cents=700)]),
                     openai_answer(None, [call("create_goal", title="Sell a poem", tasks=PLAN)]),
                     openai_answer("Planned."))
        parent.loop.run_cycle("work")
        goal_id = parent.db.scalar("SELECT id FROM goals")
        write, check, publish = (f"{goal_id}-t{n}" for n in (1, 2, 3))

        cloud.chat_handler = child_reports(parent.wallet.address)
        model.script(openai_answer(None, [call("assign_task", task_id=check, child_id=child.id)]),
                     openai_answer(None, [call("start_child", child_id=child.id)]),
                     openai_answer(None, [call("complete_task", task_id=write, result="written")]),
                     openai_answer("Waiting for the rhymes."))
        parent.loop.run_cycle("work")
        assert get_task(parent.db, check).status == "assigned"

        wait_for(lambda: any(m["from"] == child.address.lower() for m in relay.log), "the child's report", 120)
        home = parent.loop.services.home
        polled = check_social_inbox(TaskContext(parent.db, load_config(home, {}), home, parent.now, "normal",
                                                parent.wallet.address, relay=parent.relay))
        assert f"task {check} completed by {child.address.lower()}" in polled.summary
        assert get_task(parent.db, check).result == "rhymes checked"

        model.script(openai_answer(None, [call("complete_task", task_id=publish, result="sold")]),
                     openai_answer("Done."))
        parent.loop.run_cycle("work")
        assert get_goal(parent.db, goal_id).status == "completed"

    seen = [json.dumps(r.body) for r in model.requests]
    progress = [("- [x] Write the poem" in b, "- [x] Check the rhymes" in b) for b in seen if "# Active Goals" in b]
    assert progress[0] == (False, False) and (True, False) in progress and progress[-1] == (True, True)
    assert "- [~] Check the rhymes (assigned: " + child.address.lower() in "".join(seen)

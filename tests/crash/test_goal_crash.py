"""A goal worked through by the real ``automaton-min run`` while it is killed (SIGKILL) after and before its turns
commit, then restarted (README: Goals, Reliability): each task is completed exactly once, none is lost, and the
goal completes. The scripted model reads the todo block in front of it and completes the first ready task."""

from __future__ import annotations

import itertools
import json
import re
import sqlite3

from conftest import CREATOR, keep_offline
from crash.harness import Harness
from standins.model_servers import OpenAIServer, openai_answer

PLAN = [{"title": "one"}, {"title": "two"}, {"title": "three", "depends_on": [1, 2]}, {"title": "four"},
        {"title": "five", "depends_on": [3]}]
POINTS = ("turn_committed", "before_turn_commit", "turn_committed:2", "before_turn_commit:2")


def replies(db_path):
    """The model: no goal stored yet, create it; a ready task in the todo block, complete it; else keep busy."""
    count = itertools.count()

    def reply(body: dict) -> dict:
        said = json.dumps(body.get("messages") or [])
        ready = re.findall(r"\(ready; id ([A-Za-z0-9_-]+)\)", said)
        if ready:
            return openai_answer("working", [("call_0", "complete_task", json.dumps({"task_id": ready[-1],
                                                                                   "result": "done"}))])
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as con:
            goals = con.execute("SELECT COUNT(*) FROM goals").fetchone()[0]
        if not goals:
            return openai_answer("planning", [("call_0", "create_goal", json.dumps({"title": "Ship it",
                                                                                  "tasks": PLAN}))])
        n = next(count)
        return openai_answer("noting", [("call_0", "write_file", json.dumps({"path": f"notes/{n % 5}.md",
                                                                             "content": f"note {n}"}))])
    return reply


def test_a_goal_killed_midway_completes_each_task_once(cli, home) -> None:
    with OpenAIServer(mode="llamacpp") as model:
        model.script(*[replies(home.root / "state.db")] * 300)
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Ship it.", "--creator-address", CREATOR,
                    "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
        assert setup.code == 0, setup.stderr
        keep_offline(home)
        harness = Harness(home.root)
        for point in POINTS:
            harness.crash_at(point)
        harness.clean_run(turns=6)

    assert harness.failures == [] and harness.points == list(POINTS)
    goals = harness.rows("SELECT id, status FROM goals")
    assert len(goals) == 1, goals
    [(goal_id, status)] = goals
    done = harness.rows("SELECT task_id, COUNT(*) FROM event_stream WHERE type = 'task_completed' GROUP BY task_id")
    assert status == "completed" and sorted(done) == [(f"{goal_id}-t{n}", 1) for n in range(1, 6)]
    assert harness.rows("SELECT COUNT(*) FROM goals") == [(1,)]

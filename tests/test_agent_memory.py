"""Memory and the context manager through the real agent (``build_agent`` against a loopback llama.cpp server):
the prefix stays byte-identical, a small window gets the compact mode, 50 turns fit a 4096-token window with a
fold along the way, and a fact the creator told many turns (and a compression) ago comes back by relevance."""

from __future__ import annotations

import itertools
import json
import math

import orjson
import pytest

from automaton_min.agent.toolset import COMPACT_TOOLS
from automaton_min.agent.turn_context import SUMMARY_INSTRUCTIONS
from automaton_min.memory.compression import folded_through
from automaton_min.memory.tokens import count_tokens
from automaton_min.store import inbox
from automaton_min.store.turns import count_turns
from conftest import CREATOR
from standins.loopback_http import Reply
from standins.model_servers import OpenAIServer, openai_answer

OTHER_TOKENIZER = 1.08  # the stand-in counts as a model with another tokenizer would: 8% more than cl100k


def props(n_ctx: int) -> dict:
    return {"default_generation_settings": {"id": 0, "n_ctx": n_ctx, "params": {"n_predict": -1}}, "total_slots": 1}


def prompt_tokens(body: dict) -> int:
    """What a llama.cpp server would count: every message with its template tokens, and the tools."""
    total = 0
    for message in body["messages"]:
        total += count_tokens(message.get("content") or "") + 4
        for call in message.get("tool_calls") or []:
            total += count_tokens(call["function"]["name"]) + count_tokens(call["function"]["arguments"])
    total += count_tokens(orjson.dumps(body.get("tools") or []).decode())
    return math.ceil(total * OTHER_TOKENIZER)


class SmallModel:
    """A llama.cpp-like model with an ``n_ctx`` window: refuses (as llama.cpp does) a prompt that leaves no room for
    ``max_tokens``, answers summarization requests with a summary that keeps no facts, and otherwise plays
    ``actions`` in turn."""

    def __init__(self, n_ctx: int, actions) -> None:
        self.n_ctx = n_ctx
        self.actions = actions
        self.largest = 0
        self.refused = 0
        self.summaries = 0
        self.turn_bodies: list[dict] = []

    def __call__(self, body: dict):
        used = prompt_tokens(body)
        self.largest = max(self.largest, used + body.get("max_tokens", 0))
        if used + body.get("max_tokens", 0) > self.n_ctx:
            self.refused += 1
            return Reply(400, {"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": used,
                                         "n_ctx": self.n_ctx, "message": f"request ({used} tokens) exceeds the available"
                                                                         f" context size ({self.n_ctx} tokens), try increasing it"}})
        if body["messages"][0]["content"] == SUMMARY_INSTRUCTIONS:
            self.summaries += 1
            return openai_answer("The agent kept deploying and checking its notes.")
        self.turn_bodies.append(body)
        return next(self.actions)(len(self.turn_bodies))


def call(name: str, **arguments):
    return lambda n: openai_answer(None, [(f"call_{n}", name, json.dumps(arguments))])


def run_turns(agent, total: int, *, until=None) -> None:
    """Wake cycles until ``total`` turns exist (and ``until()`` holds); a bounded number, so a runtime whose every
    turn fails ends the test instead of looping forever."""
    for _ in range(total * 2):
        if count_turns(agent.db) >= total and (until is None or until()):
            return
        agent.loop.run_cycle("scripted work")
    pytest.fail(f"{count_turns(agent.db)} turns after {total * 2} wake cycles (turns are failing)")


@pytest.fixture
def model():
    with OpenAIServer(mode="llamacpp") as server:
        yield server


@pytest.fixture
def small_window():
    with OpenAIServer(mode="llamacpp", props=props(4096)) as server:
        yield server


def test_the_system_prompt_and_tools_are_byte_identical_and_the_history_is_only_appended(agent_for, model) -> None:
    agent = agent_for()
    model.script(openai_answer(None, [("c1", "remember_fact", json.dumps({"category": "domain", "key": "a", "value": "one"}))]),
                 openai_answer(None, [("c2", "recall_facts", json.dumps({"query": "one"}))]),
                 openai_answer(None, [("c3", "review_memory", "{}")]),
                 openai_answer("done"))
    agent.loop.run_cycle("test")
    bodies = [r.body for r in model.requests]
    assert len(bodies) == 4
    assert len({orjson.dumps(b["messages"][0]) for b in bodies}) == 1  # the same system prompt, byte for byte
    assert len({orjson.dumps(b["tools"]) for b in bodies}) == 1
    for before, after in itertools.pairwise(bodies):
        assert after["messages"][: len(before["messages"]) - 1] == before["messages"][:-1]  # only the tail changed
        assert before["messages"][-1]["content"].startswith("[runtime]")


def test_a_small_window_gets_the_compact_tools_and_prompt(agent_for, small_window) -> None:
    agent = agent_for(openaiBaseUrl=small_window.url, actionMode="direct")  # one request a turn (not stepwise)
    small_window.script(openai_answer(None, [("c1", "check_credits", "{}")]), openai_answer("ok"))
    agent.loop.run_cycle("test")
    first, second = (r.body for r in small_window.requests)
    names = [t["function"]["name"] for t in first["tools"]]
    assert set(names) <= set(COMPACT_TOOLS["normal"]) | set(COMPACT_TOOLS["high"]) and "exec" in names
    assert all(len(t["function"]["description"]) <= 150 for t in first["tools"])
    assert count_tokens(first["messages"][0]["content"]) <= 2_000
    assert first["tools"] == second["tools"] and first["messages"][0] == second["messages"][0]
    assert prompt_tokens(first) / OTHER_TOKENIZER < 2_000  # cl100k tokens; the full prompt and tools take about 4,400


def test_fifty_turns_fit_a_4096_token_window_and_old_turns_are_folded(agent_for, small_window) -> None:
    actions = itertools.cycle([
        call("exec", command="seq 1 250"),
        call("remember_fact", category="domain", key="build", value="the build takes four minutes " * 6),
        call("write_file", path="notes.md", content="release notes: " + "fixed the deploy script; " * 40),
        call("read_file", path="notes.md"),
        call("recall_facts", query="build minutes"),
    ])
    brain = SmallModel(4096, actions)
    small_window.script(*[brain] * 400)
    agent = agent_for(openaiBaseUrl=small_window.url, maxTurnsPerCycle=50, actionMode="direct")
    run_turns(agent, 50)
    assert brain.refused == 0 and brain.largest <= 4096
    assert agent.db.scalar("SELECT COUNT(*) FROM tool_calls WHERE error IS NOT NULL") == 0
    assert brain.summaries >= 1 and folded_through(agent.db) is not None
    assert brain.summaries <= 10  # folds wait for 6 turns to go: not a model call every other turn
    assert agent.db.scalar("SELECT COUNT(*) FROM inference_costs WHERE task_type = 'summarization'") == brain.summaries
    assert any(m["content"].startswith("[summary of earlier turns]") for m in brain.turn_bodies[-1]["messages"])
    figures = orjson.loads(agent.db.scalar("SELECT token_usage FROM turns ORDER BY timestamp DESC, id DESC LIMIT 1"))
    assert figures["context"]["window"] == 4096 and figures["context"]["used"] <= figures["context"]["capacity"]


def test_a_fact_from_the_creator_is_recalled_by_relevance_after_a_compression(agent_for, small_window, clock) -> None:
    fact = "The deploy key for the docs bucket is K-7781-QX and it rotates on the first of each month."
    actions = itertools.cycle([call("exec", command=f"echo routine check {n}; seq 1 120") for n in range(7)]
                              + [call("remember_fact", category="domain", key=f"weather{n}", value=f"sunny day {n}")
                                 for n in range(3)])
    brain = SmallModel(4096, actions)
    small_window.script(*[brain] * 400)
    agent = agent_for(openaiBaseUrl=small_window.url, maxTurnsPerCycle=50, actionMode="direct")
    inbox.insert_message(agent.db, "fact", CREATOR, fact, received_at_ms=clock(), signed_by=CREATOR.lower())
    run_turns(agent, 40)
    assert brain.summaries >= 1
    asked = "What is the deploy key for the docs bucket?"
    inbox.insert_message(agent.db, "ask", CREATOR, asked, received_at_ms=clock(), signed_by=CREATOR.lower())
    run_turns(agent, 41, until=lambda: inbox.get_message(agent.db, "ask").status == "processed")
    body = next(b for b in brain.turn_bodies if asked in b["messages"][-1]["content"])
    tail = body["messages"][-1]["content"]
    memory = tail[tail.index("--- MEMORY"):tail.index("--- END MEMORY ---")]
    assert "K-7781-QX" in memory  # retrieved into this turn's memory block
    shown = "\n".join(m.get("content") or "" for m in body["messages"][:-1])
    assert "K-7781-QX" not in shown  # not from the history or the summary: the original turn is long folded
    assert f"{CREATOR.lower()}: creator, trust 1.0" in memory  # the creator's verified messages made its entry


def test_recent_wake_events_reach_the_context_as_compact_references(agent_for, model, clock) -> None:
    from automaton_min.store.wake import post_wake

    agent = agent_for()
    post_wake(agent.db, "heartbeat", "the docs site returned 502 twice", now_ms=clock())
    model.script(openai_answer("noted"))
    agent.loop.run_cycle("a heartbeat task asked for a wake-up")
    tail = model.requests[0].body["messages"][-1]["content"]
    assert "--- RECENT WAKE EVENTS ---" in tail
    assert "| type=wake:heartbeat | createdAt=" in tail and "content=the docs site returned 502 twice" in tail


def test_status_shows_the_recent_turns_their_context_and_the_heartbeat(agent_for, model, cli, clock) -> None:
    from automaton_min.heartbeat.schedule import seed
    from automaton_min.heartbeat.tasks import DEFAULT_SCHEDULE

    agent = agent_for()
    seed(agent.db, DEFAULT_SCHEDULE, clock())
    model.script(openai_answer("Checking my notes first.", [("c1", "review_memory", "{}")]), openai_answer("All fine."))
    agent.loop.run_cycle("test")
    info = orjson.loads(cli("status", "--json").stdout)
    newest, older = info["recentTurns"][0], info["recentTurns"][1]
    assert newest["said"] == "All fine." and newest["tools"] == [] and newest["input"] is None
    assert older["tools"] == ["review_memory"] and older["input"] == "wakeup"
    assert older["context"]["used"] <= older["context"]["capacity"] and older["context"]["recommendation"] == "ok"
    assert info["heartbeat"]["enabledTasks"] > 0 and info["heartbeat"]["next"]["task"]
    text = cli("status").stdout
    assert "wakeup: review_memory" in text and f"{info['heartbeat']['enabledTasks']} tasks; next " in text

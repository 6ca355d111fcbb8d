"""Small windows that remember, through ``automaton-min run`` against a llama.cpp-like stand-in that serves ``/props``:
a fact the creator told comes back in the prompt of the turn that asks for it, 40 bulky turns and a restart later,
at 4,096 (stepwise), 8,192 (compact) and 32,768 tokens (full); an unrelated fact told the same way stays out; no
request is over the window; the memory lines stay within their share (a quarter of the window)."""

from __future__ import annotations

import json
import math
import os
import threading
import time

import orjson
import pytest

from automaton_min.agent.stepwise import CHOOSE
from automaton_min.agent.turn_context import SUMMARY_INSTRUCTIONS
from automaton_min.config import db_path, load_config
from automaton_min.memory.retrieval import WINDOW_SHARE
from automaton_min.memory.tokens import count_tokens
from automaton_min.social.receive import receive
from automaton_min.store.db import open_database
from conftest import CREATOR, RunningAgent, keep_offline
from standins.loopback_http import Reply
from standins.model_servers import OpenAIServer, openai_answer

VAULT = "Remember this: the vault code is ultramarine-4417."
UNRELATED = "Remember this too: the spare key hides under the blue flowerpot."
QUESTION = "What is the vault code?"
BULKY_TURNS = 40
OTHER_TOKENIZER = 1.08  # the stand-in counts as a model with another tokenizer would: 8% more than cl100k


def props(n_ctx: int) -> dict:
    return {"default_generation_settings": {"id": 0, "n_ctx": n_ctx, "params": {"n_predict": -1}}, "total_slots": 1}


def prompt_tokens(body: dict) -> int:
    """What a llama.cpp server would count: every message with its template tokens, and the tools."""
    total = sum(count_tokens(m.get("content") or "") + 4 + sum(
        count_tokens(c["function"]["name"]) + count_tokens(c["function"]["arguments"]) for c in m.get("tool_calls") or [])
        for m in body["messages"])
    return math.ceil((total + count_tokens(orjson.dumps(body.get("tools") or []).decode())) * OTHER_TOKENIZER)


class Brain:
    """A model with an ``n_ctx`` window: refuses a prompt that leaves no room for ``max_tokens`` (as llama.cpp
    does), summarizes without keeping facts, and otherwise runs one bulky command a turn (stepwise: chooses exec,
    then calls it) until ``work`` turns are done, then sleeps. Every turn's first request is kept."""

    def __init__(self, n_ctx: int, work: int) -> None:
        self.n_ctx, self.work = n_ctx, work
        self.largest = self.refused = 0
        self.turns: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict):
        with self.lock:
            used = prompt_tokens(body) + body.get("max_tokens", 0)
            self.largest = max(self.largest, used)
            if used > self.n_ctx:
                self.refused += 1
                return Reply(400, {"error": {"code": 400, "type": "exceed_context_size_error",
                                             "message": f"request ({used} tokens) exceeds the available context size"
                                                        f" ({self.n_ctx} tokens), try increasing it"}})
            if body["messages"][0]["content"] == SUMMARY_INSTRUCTIONS:
                return openai_answer("The agent ran long listings.")
            names = [t["function"]["name"] for t in body.get("tools") or []]
            if names != ["exec"] and names != ["sleep"]:  # a turn's first request (a step's second is one tool)
                self.turns.append(body)
            done = len(self.turns) > self.work
            if names == [CHOOSE]:
                return openai_answer(None, [("c", CHOOSE, json.dumps({"action": "sleep" if done else "exec"}))])
            if done:
                return openai_answer(None, [("c", "sleep", json.dumps({"duration_seconds": 3600}))])
            start = len(self.turns) * 1000  # another command each turn: a loop is the same call coming back
            return openai_answer(None, [("c", "exec", json.dumps({"command": f"seq {start} {start + 700}"}))])


def tell(home, message_id: str, text: str) -> None:
    """A message the creator signed, stored as the relay's intake stores one."""
    with open_database(db_path(home, load_config(home, {}))) as db:
        with db.transaction():
            receive(db, message_id, CREATOR.lower(), text, now_ms=int(time.time() * 1000), signed_by=CREATOR.lower())


def run_until_asleep(home, brain: Brain, *, tell_midway: tuple[str, str] | None = None) -> None:
    agent = RunningAgent({**os.environ, "AUTOMATON_HOME": str(home.root)})
    try:
        if tell_midway:
            agent.wait_for("tool exec ok", count=BULKY_TURNS // 2, timeout_s=300)
            tell(home, *tell_midway)
        agent.wait_for('"msg":"asleep"', timeout_s=300)
    finally:
        assert agent.stop() == 0, agent.output[-3000:]


def remembered(body: dict) -> str:
    """The memory the request carries: the memory block (direct turns) or the step's memory lines."""
    text = body["messages"][-1]["content"]
    if "--- MEMORY" in text:
        return text[text.index("--- MEMORY"):text.index("--- END MEMORY ---")]
    return "\n".join(line for line in text.splitlines() if line.startswith("You remember:"))


@pytest.mark.parametrize("window", [4096, 8192, 32768])
def test_a_fact_the_creator_told_comes_back_forty_bulky_turns_and_a_restart_later(cli, home, window) -> None:
    brain = Brain(window, work=BULKY_TURNS + 1)
    with OpenAIServer(mode="llamacpp", props=props(window)) as model:
        model.script(*[brain] * 2_000)
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Keep an eye on the machine's listings.",
                    "--creator-address", CREATOR, "--openai-base-url", model.url + "/v1",
                    "--inference-model", "small-model", "--yes")
        assert setup.code == 0, setup.stderr
        keep_offline(home, maxTurnsPerCycle=BULKY_TURNS + 10)
        tell(home, "vault", VAULT)
        run_until_asleep(home, brain, tell_midway=("unrelated", UNRELATED))  # the fact, 40 bulky turns, a sleep
        told = len(brain.turns)
        brain.work = told  # after the restart: one turn that reads the question, then sleep
        tell(home, "question", QUESTION)
        run_until_asleep(home, brain)

    asking = next(body for body in brain.turns[told:] if QUESTION in orjson.dumps(body).decode())
    prompt = orjson.dumps(asking["messages"]).decode()
    assert "ultramarine-4417" in prompt and "flowerpot" not in prompt
    memory = remembered(asking)
    assert "ultramarine-4417" in memory and "your creator" in memory  # retrieved, labelled as the creator's word
    assert count_tokens(memory) <= window * WINDOW_SHARE
    assert brain.refused == 0 and brain.largest <= window and model.rejections == []
    assert sum(UNRELATED in orjson.dumps(body).decode() for body in brain.turns) >= 1  # it was told, and read


# --------------------------------------------------------------------------- the mode is learnt, per model


@pytest.fixture
def model():
    """``agent_for``'s model server: llama.cpp-like, publishing an 8,192-token window."""
    with OpenAIServer(mode="llamacpp", props=props(8192)) as server:
        yield server


def tools_of(request) -> list[str]:
    return [t["function"]["name"] for t in request.body.get("tools") or []]


def choose(action: str) -> dict:
    return openai_answer(None, [("c", CHOOSE, json.dumps({"action": action}))])


def sleep_call() -> dict:
    return openai_answer(None, [("c", "sleep", json.dumps({"duration_seconds": 600}))])


def test_a_model_that_answers_twice_in_text_goes_stepwise_at_once_and_stays_so_after_a_restart(
        agent_for, model, cli) -> None:
    agent = agent_for()
    model.script(openai_answer("I will look around first."), openai_answer("Still thinking."),
                 choose("sleep"), sleep_call())
    cycle = agent.loop.run_cycle("first start")
    first, second, third, _ = model.requests
    assert "exec" in tools_of(first) and tools_of(second) == tools_of(first)  # compact: one request a turn
    assert tools_of(third) == [CHOOSE]  # then stepwise, with no sleep between (the fall-back takes two turns)
    assert cycle.turns == 3 and cycle.slept_for_s == 600

    restarted = agent_for()
    model.script(choose("sleep"), sleep_call())
    restarted.loop.run_cycle("restart")
    assert tools_of(model.requests[4]) == [CHOOSE]  # remembered for this model
    status = orjson.loads(cli("status", "--json").stdout)
    assert status["actionMode"]["mode"] == "stepwise" and "no valid tool call in 2 turns" in status["actionMode"]["why"]
    doctor = cli("doctor").stdout
    assert "action mode" in doctor and "stepwise" in doctor


def test_a_model_that_calls_tools_at_8k_stays_compact_and_a_new_model_learns_afresh(agent_for, model, cli) -> None:
    agent = agent_for()
    model.script(openai_answer(None, [("c", "exec", json.dumps({"command": "echo hi"}))]), sleep_call())
    agent.loop.run_cycle("first start")
    restarted = agent_for()
    model.script(openai_answer("Nothing to do."))  # text now: a capable model resting
    cycle = restarted.loop.run_cycle("restart")
    assert all("exec" in tools_of(r) for r in model.requests)  # compact throughout, never stepwise
    assert cycle.turns == 1 and cycle.reason == "answered without using a tool"  # slept on, as any text answer
    assert orjson.loads(cli("status", "--json").stdout)["actionMode"]["mode"] == "compact"

    other = agent_for(inferenceModel="another-small-model")
    model.script(openai_answer("Hello."), openai_answer("Hello again."), choose("sleep"), sleep_call())
    other.loop.run_cycle("a new model")
    assert tools_of(model.requests[-2]) == [CHOOSE]  # the new model learnt stepwise; the first stays compact

"""Opt-in acceptance against a real llama.cpp server (``pytest -m llm``); skipped unless ``AUTOMATON_LLAMACPP_URL``
names one, e.g. ``http://127.0.0.1:8080``. ``AUTOMATON_LLAMACPP_MODEL`` picks the model name (default ``local``;
single-model servers ignore it). How to start one with a small Gemma GGUF: shared/reference/testing-peers.md
("A real LLM with tool calls"):

    python -m llama_cpp.server --model gemma3-270m.gguf --host 127.0.0.1 --port 8080 \\
        --chat_format chatml-function-calling --n_ctx 4096 --cache false
    AUTOMATON_LLAMACPP_URL=http://127.0.0.1:8080 python -m pytest -m llm -s tests/test_llm_llamacpp.py

The direct-turns test sets the window from ``AUTOMATON_LLAMACPP_CTX`` (default 4096, the ``--n_ctx`` above), to
measure the prompt cache, whose prefix reuse works with or without ``--cache`` (see README, Performance); the
purpose test learns the window from the server's first refusal.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

import orjson
import pytest

from automaton_min.inference.openai_compat import OpenAICompatibleProvider
from automaton_min.inference.types import ChatRequest, ChatResult, Message, ToolSchema
from automaton_min.store.turns import count_turns
from conftest import CREATOR, RunningAgent, keep_offline
from standins.loopback_http import LoopbackServer, Reply, Request

URL = os.environ.get("AUTOMATON_LLAMACPP_URL", "").strip()
MODEL = os.environ.get("AUTOMATON_LLAMACPP_MODEL", "local").strip() or "local"
ATTEMPTS = 4  # small models sometimes answer in text instead of calling the tool
WINDOW = int(os.environ.get("AUTOMATON_LLAMACPP_CTX", "4096"))

pytestmark = [
    pytest.mark.llm,
    pytest.mark.skipif(not URL, reason="set AUTOMATON_LLAMACPP_URL to a running llama.cpp server to run this"),
]

WEATHER = ToolSchema(
    "get_weather", "Get the current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}}, "required": ["city"]},
)
SYSTEM = Message("system", "You are a helpful assistant that uses tools.")  # wording a 270M model reliably acts on
USER = Message("user", "What is the weather in Paris? Use the get_weather tool.")


def test_a_real_llamacpp_server_calls_a_tool_and_accepts_its_result() -> None:
    provider = OpenAICompatibleProvider(URL, os.environ.get("AUTOMATON_LLAMACPP_KEY") or None, provider_name="llamacpp")
    answers: list[ChatResult] = []
    for _ in range(ATTEMPTS):
        result = provider.chat(ChatRequest(MODEL, (SYSTEM, USER), max_tokens=128, tools=(WEATHER,), temperature=0.2,
                                           timeout_s=120))
        answers.append(result)
        if result.tool_calls:
            break
    else:
        pytest.fail(f"no tool call in {ATTEMPTS} attempts; the model said: {[a.content[:80] for a in answers]}")

    calls = result.tool_calls
    assert len({c.id for c in calls}) == len(calls) and all(c.id for c in calls)
    assert any(c.name == "get_weather" for c in calls), [c.name for c in calls]
    # the arguments were parsed (or the failure explained); never a crash
    assert all(isinstance(c.arguments, dict) and (c.argument_error is None or c.arguments == {}) for c in calls)

    history = (SYSTEM, USER, Message("assistant", result.content, tool_calls=calls),
               *(Message("tool", "Sunny, 21 C." if c.name == "get_weather" else "error: unknown tool", tool_call_id=c.id)
                 for c in calls))
    # a second call carrying the results must be accepted (2xx): chat raises ProviderError on anything else,
    # e.g. llama.cpp's 500 for "content": null next to tool_calls
    second = provider.chat(ChatRequest(MODEL, history, max_tokens=128, tools=(WEATHER,), temperature=0.2, timeout_s=120))
    assert isinstance(second.content, str)
    assert second.provider == "llamacpp"


# --------------------------------------------------------------------------- the real agent against the server


def _forward(request: Request) -> Reply:
    """Pass a request on to the real server unchanged and its answer back, whatever the status."""
    query = f"?{request.query}" if request.query else ""
    upstream = urllib.request.Request(f"{URL.rstrip('/')}{request.path}{query}", data=request.body or None,
                                      method=request.method,
                                      headers={k: v for k, v in request.headers.items()
                                               if k.lower() in ("content-type", "authorization", "accept")})
    try:
        with urllib.request.urlopen(upstream, timeout=300) as response:
            return Reply(response.status, response.read(), {"Content-Type": response.headers.get("Content-Type", "")})
    except urllib.error.HTTPError as error:
        return Reply(error.code, error.read(), {"Content-Type": error.headers.get("Content-Type", "")})


@pytest.fixture
def model():
    """``agent_for``'s model server: the real one, behind a forwarding proxy on 127.0.0.1 that keeps every request."""
    with LoopbackServer({("POST", r"/.*"): _forward, ("GET", r"/.*"): _forward}) as proxy:
        yield proxy


def test_the_real_agent_takes_two_turns_and_the_second_request_extends_the_first(agent_for, model) -> None:
    """Two direct turns (``actionMode: direct``) of the real agent (``build_agent``) on the real server: both
    requests fit the window, and the second one repeats the first's system prompt and tools byte for byte and
    extends its history, so a prefix cache can reuse it. The wall time of each request is printed (``-s``), never
    asserted."""
    agent = agent_for(modelStrategy={"contextWindow": WINDOW}, maxTurnsPerCycle=2, actionMode="direct")
    for _ in range(3):  # a cycle ends early when the model answers in text instead of calling a tool
        agent.loop.run_cycle("Check your credits, then write a note about what you found.")
        if count_turns(agent.db) >= 2:
            break
    assert count_turns(agent.db) >= 2, agent.db.query("SELECT key, value FROM kv WHERE key = 'last_error'")

    rows = agent.db.query("SELECT input_tokens, output_tokens, latency_ms FROM inference_costs"
                          " WHERE task_type = 'agent_turn' ORDER BY rowid")
    assert len(rows) >= 2  # a row is written only for a request that succeeded: no context-length error
    (in1, out1, ms1), (in2, out2, ms2) = rows[:2]
    assert in1 > 0 and in2 > 0, rows  # the server's count (llama-cpp-python sums it over a reply's tool calls)

    bodies = [r.json() for r in model.requests if r.method == "POST" and r.path.endswith("/chat/completions")]
    first, second = bodies[:2]
    assert first["messages"][0] == second["messages"][0] and first["tools"] == second["tools"]
    assert second["messages"][: len(first["messages"]) - 1] == first["messages"][:-1]
    assert first["messages"][-1]["content"].startswith("[runtime]")

    print(f"\nllama.cpp agent turns: turn 1 {ms1} ms ({in1} prompt tokens, {out1} out),"
          f" turn 2 {ms2} ms ({in2} prompt tokens, {out2} out), turn 2 / turn 1 = {ms2 / max(ms1, 1):.2f}")


PURPOSES = {  # the purpose, and what its action leaves in the workspace
    "write_file": ("Write a haiku about the sea into haiku.txt, then sleep.", "haiku.txt"),
    "exec": ("Run the shell command `mkdir reports`, then sleep.", "reports"),
    "exec, the command after a colon": ("Use the exec tool to run the shell command: mkdir reports. Then sleep.",
                                        "reports"),
}


@pytest.mark.parametrize("tool", sorted(PURPOSES))
def test_the_real_agent_does_what_its_purpose_asks_then_sleeps(agent_for, model, home, tool) -> None:
    """The README's local model acts: within 5 turns a call of the purpose's tool lands (the file or folder is
    there, a file not empty), and the agent then sleeps. No window is configured: it is learnt. Temperature 0 and a
    fixed seed; each request is printed (``-s``)."""
    purpose, produced = PURPOSES[tool]
    agent = agent_for(genesisPrompt=purpose, maxTurnsPerCycle=5, modelStrategy={"temperature": 0, "seed": 7})
    cycle = agent.loop.run_cycle("first start")
    calls = agent.db.query("SELECT name, arguments, result, error FROM tool_calls ORDER BY rowid")
    rows = agent.db.query("SELECT input_tokens, output_tokens, latency_ms FROM inference_costs ORDER BY rowid")
    print(f"\n{tool}: {count_turns(agent.db)} turns, ended {cycle.reason!r}; calls "
          f"{[(n, a[:70], (r or e or '')[:50]) for n, a, r, e in calls]}; requests (prompt tokens, out, ms) {rows}")
    path = home.root / "workspace" / produced
    assert path.is_dir() or (path.is_file() and path.read_text().strip()), calls
    assert count_turns(agent.db) <= 5 and agent.loop.hooks.state() == "sleeping", cycle


def test_the_real_run_writes_the_haiku_and_sleeps(cli, home) -> None:
    """The same purpose through ``automaton-min run`` as a process: this source tree, or the one-file binary when
    ``AUTOMATON_BINARY`` names it (``conftest.program()``); set up as the README says (base URL, temperature 0,
    seed 7), no window configured. One SIGTERM after the agent falls asleep; the log's lines are printed (``-s``)."""
    purpose = PURPOSES["write_file"][0]
    setup = cli("setup", "--name", "ada", "--genesis-prompt", purpose, "--creator-address", CREATOR,
                "--openai-base-url", f"{URL.rstrip('/')}/v1", "--inference-model", MODEL, "--yes")
    assert setup.code == 0, setup.stderr
    keep_offline(home, modelStrategy={**orjson.loads(home.config_path.read_bytes())["modelStrategy"],
                                      "temperature": 0, "seed": 7}, maxTurnsPerCycle=5)
    agent = RunningAgent({**os.environ, "AUTOMATON_HOME": str(home.root)})
    try:
        agent.wait_for('"msg":"asleep"', timeout_s=600)
    finally:
        code = agent.stop()
    print("\n" + "".join(line for line in agent.lines if '"tool' in line or "asleep" in line))
    haiku = home.root / "workspace" / "haiku.txt"
    assert code == 0 and haiku.is_file() and haiku.read_text().strip(), agent.output[-3000:]


def test_the_real_agent_does_its_goals_next_task(agent_for, model, home) -> None:
    """A goal's one task, shown to the README's local model as its stepwise turns' task: its first write lands in
    the task's file (under the purpose alone it would not know the file). The 270M model does not mark the task done
    (complete_task is in its table; README: Goals); each call and the task's state are printed (``-s``)."""
    from automaton_min.goals.board import create_goal
    from automaton_min.goals.plan import check_plan, store_plan
    from automaton_min.store.goals import get_task

    agent = agent_for(genesisPrompt="Do the tasks of your goal.", maxTurnsPerCycle=4,
                      modelStrategy={"temperature": 0, "seed": 7})
    goal = create_goal(agent.db, "Report in", None, actor="creator", now_ms=agent.now())
    with agent.db.transaction():
        [task] = store_plan(agent.db, goal.id, check_plan([{"title": "Write the word ready into status.txt"}]),
                            agent.now())
    cycle = agent.loop.run_cycle("first start")
    calls = agent.db.query("SELECT name, arguments, result, error FROM tool_calls ORDER BY rowid")
    print(f"\ngoal: {count_turns(agent.db)} turns, ended {cycle.reason!r}, task {get_task(agent.db, task).status};"
          f" calls {[(n, a[:70], (r or e or '')[:50]) for n, a, r, e in calls]}")
    status = home.root / "workspace" / "status.txt"
    assert status.is_file() and status.read_text().strip(), calls


# --------------------------------------------------------------------------- small models in their own words

NEW_USER_PURPOSES = {  # the README's wording, and how a new user would put the same thing
    "readme": ("Write a haiku about the sea into haiku.txt, then sleep.", "haiku.txt"),
    "new user": ("Write a three-line haiku about the sea into haiku.txt in your workspace.", "haiku.txt"),
}
TOLD = "Remember this: the vault code is ultramarine-4417."
ASKED = "What is the vault code?"


@pytest.mark.parametrize("wording", sorted(NEW_USER_PURPOSES))
def test_a_small_model_in_a_new_users_words_acts_and_remembers_what_it_was_told(agent_for, model, home, clock,
                                                                                 wording) -> None:
    """The measurement README's Local model section gives (``-s`` prints it): the real agent on the server's model
    (``AUTOMATON_LLAMACPP_MODEL`` names it in the output only), its purpose in the README's words or a new user's,
    up to 8 turns (the window learnt, or ``AUTOMATON_LLAMACPP_CTX`` when set: llama-cpp-python publishes none, and a
    prompt that fits teaches nothing); then the creator's signed message with a fact, and later the question.
    Asserted: the told fact reaches the prompt of the turn that asks (whatever the mode); what the model did is
    printed, not asserted."""
    import time

    from automaton_min.social.receive import receive

    purpose, produced = NEW_USER_PURPOSES[wording]
    told_window = {"contextWindow": WINDOW} if os.environ.get("AUTOMATON_LLAMACPP_CTX") else {}  # else learnt
    agent = agent_for(genesisPrompt=purpose, maxTurnsPerCycle=8,
                      modelStrategy={"temperature": 0, "seed": 7, **told_window})
    started = time.monotonic()
    cycle = agent.loop.run_cycle("first start")
    minutes = (time.monotonic() - started) / 60
    turns = count_turns(agent.db)
    calls = agent.db.query("SELECT name, arguments, result, error FROM tool_calls ORDER BY rowid")
    path = home.root / "workspace" / produced
    wrote = sorted(p.name for p in (home.root / "workspace").iterdir()) if (home.root / "workspace").exists() else []

    with agent.db.transaction():
        receive(agent.db, "told", CREATOR.lower(), TOLD, now_ms=clock(), signed_by=CREATOR.lower())
    agent.loop.run_cycle("a message")
    with agent.db.transaction():
        receive(agent.db, "asked", CREATOR.lower(), ASKED, now_ms=clock(), signed_by=CREATOR.lower())
    asked_from = len(model.requests)
    agent.loop.run_cycle("a message")
    asking = [r.json() for r in model.requests[asked_from:] if r.path.endswith("/chat/completions")]
    reached = any("ultramarine-4417" in orjson.dumps(body["messages"]).decode() for body in asking[:1])
    mode = agent.db.scalar("SELECT value FROM kv WHERE key = 'action_mode'")
    written = f"written ({path.read_text()[:80]!r})" if path.is_file() else "not written"
    print(f"\n{MODEL} / {wording}: {turns} turns in {minutes:.1f} min ({turns / max(minutes, 1e-9):.1f} a minute),"
          f" ended {cycle.reason!r}; mode {mode}; {produced} {written}; files {wrote};"
          f" calls {[(n, a[:60], (r or e or '')[:40]) for n, a, r, e in calls]}; told fact in the asking prompt:"
          f" {reached}")
    assert reached, asking[:1]

"""Fault injection on the inference server: HTTP 500s, 429 with Retry-After, truncated bodies, malformed bodies and
10 MB bodies, injected by ``FaultProxy`` in front of the scripted llama.cpp stand-in, through the real agent
(``build_agent``: its providers, resilient HTTP layer, router and loop).

Asserted every time: the cycle does not raise; a fault the resilient layer may retry (500, 429, a body cut short)
is retried with the wait it chose observed on the test clock (Retry-After exactly, else the jittered backoff) and
the turn completes once the server answers; a fault that outlasts the retries, or one that is not retryable (a
200 whose body is not a usable answer, a body over the 8 MiB cap), fails that turn only: nothing of it is written,
KV ``last_error`` names the problem in one bounded line, and the next turn, against a recovered server, commits.
"""

from __future__ import annotations

import json
from email.utils import formatdate

import pytest

from faults.proxy import FaultProxy, Huge, Status, Truncated
from faults.support import last_error
from faults.support import agent_clock, fault_clock  # noqa: F401 (fixtures)
from automaton_min.store import inbox
from standins.model_servers import OpenAIServer, openai_answer

CHAT = "/v1/chat/completions"


@pytest.fixture
def server():
    with OpenAIServer(mode="llamacpp") as scripted:
        yield scripted


@pytest.fixture
def model(server):
    """What ``agent_for`` points the agent at: the fault proxy in front of the scripted server."""
    with FaultProxy(server.url, only=CHAT) as proxy:
        yield proxy


def turns(agent) -> list[tuple[str, str]]:
    return agent.db.query("SELECT thinking, input_source FROM turns ORDER BY timestamp")


def test_500s_are_retried_with_backoff_and_the_turn_completes(agent_for, server, model, fault_clock) -> None:
    agent = agent_for()
    model.inject(Status(500), Status(500))
    server.script(openai_answer("answered after two 500s"))
    result = agent.loop.run_cycle("test")
    assert result.turns == 1
    assert turns(agent) == [("answered after two 500s", "wakeup")]
    assert model.seen == 3 and len(server.requests) == 1  # two faulted attempts, then the one that reached it
    first, second = fault_clock.waits
    assert 0.5 <= first < 1.5 and 1.0 <= second < 3.0  # base 1 s, doubled, jittered in [0.5, 1.5)
    assert last_error(agent.db) == ""


def test_500s_past_the_retries_fail_one_turn_then_the_agent_goes_on(agent_for, server, model, fault_clock, clock) -> None:
    agent = agent_for()
    inbox.insert_message(agent.db, "m1", "0x" + "ab" * 20, "hello after the outage", received_at_ms=fault_clock())
    model.inject(*[Status(500)] * 4)  # the first attempt and all three retries
    server.script(openai_answer(None, [("call_0", "exec", json.dumps({"command": "echo recovered"}))]),
                  openai_answer("all good"))
    result = agent.loop.run_cycle("test")
    assert result.turns == 3  # the failed wakeup turn, the turn that read the message, a text-only turn
    assert len(fault_clock.waits) == 3
    assert "inference error" in last_error(agent.db) and "500" in last_error(agent.db)
    assert len(last_error(agent.db)) <= 500
    assert [source for _, source in turns(agent)] == ["inbox", None]  # nothing of the failed turn was written
    assert inbox.get_message(agent.db, "m1").status == "processed"


@pytest.mark.parametrize("retry_after, expected_s", [("7", 7.0), ("date+12", None)])
def test_429_waits_what_retry_after_says(agent_for, server, model, fault_clock, retry_after, expected_s) -> None:
    agent = agent_for()
    if retry_after.startswith("date+"):  # the HTTP-date form (whole seconds), on the same clock the client reads
        at = int(fault_clock.wall()) + int(retry_after[5:])
        retry_after, expected_s = formatdate(at, usegmt=True), at - fault_clock.wall()
    model.inject(Status(429, b'{"error": {"message": "rate limited", "type": "rate_limit_error"}}',
                        {"Content-Type": "application/json", "Retry-After": retry_after}))
    server.script(openai_answer("after the rate limit"))
    agent.loop.run_cycle("test")
    assert fault_clock.waits == [expected_s]  # the server's wait, not the jittered backoff
    assert turns(agent) == [("after the rate limit", "wakeup")]


def test_a_429_that_outlasts_the_retries_is_a_failed_turn_naming_the_rate_limit(agent_for, server, model,
                                                                                 fault_clock) -> None:
    agent = agent_for()
    limited = Status(429, b'{"error": {"message": "slow down", "type": "rate_limit_error"}}',
                     {"Content-Type": "application/json", "Retry-After": "2"})
    model.inject(*[limited] * 4)
    server.script(openai_answer("later"))
    agent.loop.run_cycle("test")
    assert fault_clock.waits == [2.0, 2.0, 2.0]
    assert "429" in last_error(agent.db) and "slow down" in last_error(agent.db)
    assert turns(agent) == [("later", None)]


def test_a_body_cut_short_is_retried_and_the_turn_completes(agent_for, server, model, fault_clock) -> None:
    agent = agent_for()
    model.inject(Truncated(declared=5000, sent=120))
    server.script(openai_answer("whole answer"))
    agent.loop.run_cycle("test")
    assert model.seen == 2 and len(fault_clock.waits) == 1
    assert turns(agent) == [("whole answer", "wakeup")]


def test_bodies_cut_short_every_time_fail_the_turn_with_a_network_error(agent_for, server, model, fault_clock) -> None:
    agent = agent_for()
    model.inject(*[Truncated(declared=5000, sent=120)] * 4)
    server.script(openai_answer("back"))
    agent.loop.run_cycle("test")
    error = last_error(agent.db)
    assert error.startswith("inference error (openai-compatible)") and "4 attempts" in error
    assert turns(agent) == [("back", None)]


MALFORMED = {
    "cut JSON": b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "hal',
    "HTML page": b"<html><body><h1>502 Bad Gateway</h1></body></html>",
    "empty body": b"",
    "JSON array": b"[1, 2, 3]",
    "no choices": b'{"object": "chat.completion", "model": "x"}',
    "invalid UTF-8": b'{"choices": [{"message": {"role": "assistant", "content": "\xff\xfe"}}]}',
}


@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_200_fails_one_turn_and_is_not_retried(agent_for, server, model, fault_clock, name) -> None:
    agent = agent_for()
    model.inject(Status(200, MALFORMED[name], {"Content-Type": "application/json"}))
    server.script(openai_answer("sane again"))
    result = agent.loop.run_cycle("test")
    assert result.turns == 2
    assert model.seen == 2 and fault_clock.waits == []  # a 200 is an answer: not retried
    error = last_error(agent.db)
    assert error.startswith("inference error (openai-compatible)") and "\n" not in error and len(error) <= 500
    assert turns(agent) == [("sane again", None)]


TEN_MB = 10 * 1024 * 1024
HUGE = {
    "not JSON": lambda: None,
    "answer text": lambda: json.dumps(openai_answer("A" * TEN_MB)).encode(),
    "tool argument": lambda: json.dumps(openai_answer(None, [("call_0", "write_file", json.dumps(
        {"path": "big.md", "content": "B" * TEN_MB}))])).encode(),
}


@pytest.mark.parametrize("name", HUGE)
def test_a_10_mb_body_is_refused_as_one_failed_turn_and_nothing_of_it_is_kept(agent_for, server, model, fault_clock,
                                                                              home, name) -> None:
    agent = agent_for()
    model.inject(Huge(TEN_MB, body=HUGE[name]()))
    server.script(openai_answer("small again"))
    result = agent.loop.run_cycle("test")
    assert result.turns == 2 and fault_clock.waits == []
    error = last_error(agent.db)
    assert "over the 8 MiB" in error and len(error) <= 500
    assert turns(agent) == [("small again", None)]
    assert agent.db.scalar("SELECT COUNT(*) FROM tool_calls") == 0 and not (home.root / "workspace" / "big.md").exists()
    assert len(json.dumps(server.requests[-1].body)) < 100_000  # the next prompt carries none of it

"""The runtime records into the Metrics given to build_agent: turns, tool durations, inference, policy, balances."""

from __future__ import annotations

import json

import orjson
import pytest

from automaton_min.config import load_config
from automaton_min.observe import metrics as m
from automaton_min.observe.metrics import Metrics
from automaton_min.runtime.agent_runtime import build_agent
from conftest import CREATOR
from standins.conway_api import ConwayApi
from standins.loopback_http import Reply
from standins.model_servers import OpenAIServer, openai_answer


@pytest.fixture
def model():
    with OpenAIServer(mode="llamacpp") as server:
        yield server


@pytest.fixture
def conway():
    with ConwayApi(balance_cents=700) as api:
        yield api


@pytest.fixture
def agent(cli, home, model, conway, clock):
    result = cli("setup", "--name", "ada", "--genesis-prompt", "Write notes.", "--creator-address", CREATOR,
                 "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
    assert result.code == 0, result.stderr
    config = {**orjson.loads(home.config_path.read_bytes()), "rpcUrl": "http://127.0.0.1:9",
              "conwayApiUrl": conway.url, "conwayApiKey": conway.api_key}
    home.config_path.write_bytes(orjson.dumps(config))
    metrics = Metrics(now=clock)
    built = build_agent(home, load_config(home, {}), now=clock, metrics=metrics)
    yield built, metrics
    built.sandbox.close()
    built.db.close()


def test_a_cycle_records_turns_tools_inference_policy_and_balances(agent, model):
    built, metrics = agent
    model.script(
        openai_answer(None, [("c0", "exec", json.dumps({"command": "echo hi"})),
                             ("c1", "read_file", json.dumps({"path": "../wallet.json"}))]),
        Reply(400, {"error": {"message": "bad request"}}),  # a failed turn
        openai_answer("Done.", [("c2", "sleep", json.dumps({"duration_seconds": 600, "reason": "done"}))]))
    built.loop.run_cycle("test")

    assert metrics.counter(m.TURNS) == 2 and metrics.counter(m.TURNS_FAILED) == 1
    assert metrics.counter(m.TOOL_CALLS, tool="exec", outcome="ok") == 1
    assert metrics.counter(m.TOOL_CALLS, tool="read_file", outcome="error") == 1  # refused by the policy
    assert metrics.histogram(m.TOOL_DURATION, tool="exec")["count"] == 1
    assert metrics.counter(m.INFERENCE_CALLS, model="scripted-model") == 2
    assert metrics.histogram(m.INFERENCE_LATENCY, model="scripted-model")["count"] == 2
    snapshot = metrics.snapshot()
    assert snapshot.counter(m.POLICY_DENIES) == 1
    assert snapshot.counter(m.POLICY_DECISIONS) == built.db.scalar("SELECT COUNT(*) FROM policy_decisions")
    assert metrics.gauge(m.BALANCE_CENTS) == 700 and metrics.gauge(m.SURVIVAL_TIER) == 4
    assert metrics.gauge(m.CONTEXT_TOKENS) > 0

"""The Base RPC node down: ``RpcServer.fail(mode, times=None)`` (HTTP 500, an HTML answer, JSON-RPC errors) in
front of the local chain, while the real agent (``build_agent``) reads its USDC through it; and the ``wallet``
command against it.

Asserted: the balance read fails gracefully -- the cycles complete; the USDC balance stays the last one read
(never zero); the credit tier and the state are not touched (no dead, no critical); ``check_usdc_balance`` called
by the model returns an error the model reads and the turn commits; ``automaton-min wallet`` says in one line that
the node failed and which setting to change, exit 1; once the node answers again the next read is live.
"""

from __future__ import annotations

import json

import pytest

from faults.support import SCRIPTED
from faults.support import agent_clock, conway, fault_clock, model  # noqa: F401 (fixtures)
from automaton_min.agent.states import read_agent_state
from standins.model_servers import openai_answer


def cycle(agent, model, clock, answer=None) -> None:
    clock.advance(2 * 60_000)  # past the financial cache's interval: USDC is read again
    model.script(answer or openai_answer("checking in"))
    agent.loop.run_cycle("test")


@pytest.mark.parametrize("mode", ["http_500", "bad_json", "rpc_error"])
def test_a_failing_node_keeps_the_last_usdc_balance_and_the_state(agent_for, model, conway, fault_clock, chain, rpc,
                                                                  mode) -> None:
    agent = agent_for(conwayApiUrl=conway.url, conwayApiKey=conway.api_key, rpcUrl=rpc.url, modelStrategy=SCRIPTED)
    chain.mint(agent.wallet.address, 3_000_000)
    cycle(agent, model, fault_clock)
    before = agent.hooks.finances(fault_clock())
    assert before.usdc_atomic == 3_000_000
    state_before = read_agent_state(agent.db)

    rpc.fail(mode, times=None)
    try:
        check = openai_answer(None, [("call_0", "check_usdc_balance", "{}")])
        cycle(agent, model, fault_clock, check)
        cycle(agent, model, fault_clock)
        reading = agent.hooks.finances(fault_clock())
        assert reading.usdc_atomic == 3_000_000 and reading.credits_cents == 1234
        assert read_agent_state(agent.db) == state_before and read_agent_state(agent.db) not in ("dead", "critical")
        result, error = agent.db.query("SELECT result, error FROM tool_calls WHERE name = 'check_usdc_balance'")[0]
        assert error and "0.000000" not in (result or "")  # an error for the model, never a zero balance
        assert agent.db.scalar("SELECT COUNT(*) FROM turns") >= 3
    finally:
        rpc.clear_faults()

    chain.mint(agent.wallet.address, 1_000_000)
    cycle(agent, model, fault_clock)
    assert agent.hooks.finances(fault_clock()).usdc_atomic == 4_000_000


def test_wallet_names_the_node_and_the_setting_when_the_node_fails(set_up, cli, rpc) -> None:
    from conftest import keep_offline

    keep_offline(set_up, rpcUrl=rpc.url)
    rpc.fail("http_500", times=None)
    try:
        result = cli("wallet", "--json")
    finally:
        rpc.clear_faults()
    assert result.code == 1 and "Traceback" not in result.stderr
    answer = json.loads(result.stdout)
    assert "rpcUrl" in answer["fix"] and answer["error"]

"""A hung inference server: ``FaultProxy`` takes the request and answers nothing (``Hold``), through the real agent.

Real time on purpose: a hang is ended by the kernel's socket timeout and the router's deadline, both real clocks,
so this module does not use the test clock of the other inference tests (mixing the two would let a retry start
after the deadline had passed). The turn's deadline is shortened to 1 s (``Router.timeouts``) instead of the
120 s the runtime gives an agent turn.

Asserted: the wait ends at the deadline (not at the server's whim), the turn fails with ``last_error`` naming the
deadline, nothing of it is written, the hung request is not retried past the deadline, and the next turn against a
server that answers again commits.
"""

from __future__ import annotations

import time

import pytest

from faults.proxy import FaultProxy, Hold
from faults.support import last_error
from standins.model_servers import OpenAIServer, openai_answer


@pytest.fixture
def server():
    with OpenAIServer(mode="llamacpp") as scripted:
        yield scripted


@pytest.fixture
def model(server):
    with FaultProxy(server.url, only="/v1/chat/completions") as proxy:
        yield proxy


def test_a_hung_server_costs_one_turn_its_deadline_and_the_agent_goes_on(agent_for, server, model) -> None:
    agent = agent_for()
    agent.loop.router.timeouts["agent_turn"] = 1.0
    hang = Hold(hold_s=20)
    model.inject(hang)
    server.script(openai_answer("answering again"))
    started = time.monotonic()
    result = agent.loop.run_cycle("test")
    elapsed = time.monotonic() - started
    assert hang.arrived.is_set()
    assert result.turns == 2 and elapsed < 6  # one deadline (1 s) and a quick turn, not the 20 s hang
    assert "within 1 s" in last_error(agent.db)
    assert agent.db.query("SELECT thinking, input_source FROM turns") == [("answering again", None)]
    assert model.seen == 2 and len(server.requests) == 1  # the hung request was not retried past the deadline

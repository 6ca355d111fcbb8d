"""The social relay down: ``FaultProxy.down()`` in front of the relay stand-in answers every request 503 (and a
connection to a closed port for a relay that is gone), while the real agent (``build_agent``: its RelayClient, the
``social`` breaker, send_message, the ``check_social_inbox`` task) works.

Asserted: send_message fails to a one-line error the model reads, the turn commits and the cycle goes on (no
``last_error``: a failed tool is not a failed turn); the inbox poll fails to a text result with a backoff, without
an exception; when the relay is back, a message sends and a waiting message is polled into the inbox.
"""

from __future__ import annotations

import json

import pytest
from eth_account import Account
from eth_utils import keccak

from faults.proxy import FaultProxy
from faults.support import last_error
from faults.support import agent_clock, fault_clock, model  # noqa: F401 (fixtures)
from automaton_min.heartbeat.task_api import TaskContext
from automaton_min.heartbeat.social_inbox import check_social_inbox
from automaton_min.store import inbox
from standins.model_servers import openai_answer
from standins.social_relay import SocialRelay

FRIEND = Account.from_key(keccak(text="faults:friend"))


@pytest.fixture
def relay(fault_clock):  # noqa: F811
    with SocialRelay(now=fault_clock) as stand_in:
        yield stand_in


@pytest.fixture
def proxy(relay):
    with FaultProxy(relay.url) as front:
        yield front


def send(content: str) -> dict:
    return openai_answer(None, [("call_0", "send_message", json.dumps({"to_address": FRIEND.address, "content": content}))])


def poll(agent, home, clock):
    return check_social_inbox(TaskContext(db=agent.db, config=agent.loop.config, home=home, now=clock, tier="normal",
                                          wallet_address=agent.wallet.address, relay=agent.relay))


@pytest.mark.parametrize("outage", ["503", "closed port"])
def test_send_message_while_the_relay_is_down_is_a_tool_error_and_works_when_it_is_back(
        agent_for, model, relay, proxy, fault_clock, outage) -> None:
    agent = agent_for(socialRelayUrl=proxy.url if outage == "503" else "http://127.0.0.1:9")
    proxy.down()
    model.script(send("are you there?"), openai_answer("the relay is down; later"))
    result = agent.loop.run_cycle("test")
    assert result.turns == 2 and last_error(agent.db) == ""
    error = agent.db.scalar("SELECT error FROM tool_calls WHERE name = 'send_message'")
    assert error.startswith("message not sent") and "\n" not in error
    assert relay.log == []

    if outage == "closed port":  # the relay moved: the agent is pointed at the live one
        agent = agent_for(socialRelayUrl=proxy.url)
    proxy.up()
    fault_clock.advance(120_000)
    model.script(send("back again"), openai_answer("sent"))
    agent.loop.run_cycle("test")
    assert [m["content"] for m in relay.log] == ["back again"]


def test_polling_a_down_relay_backs_off_and_picks_up_the_message_once_it_is_back(
        agent_for, model, relay, proxy, fault_clock, home) -> None:
    agent = agent_for(socialRelayUrl=proxy.url)
    relay.inject(relay.signed_message(FRIEND.key, FRIEND.address, agent.wallet.address, "hello while you were away"))
    proxy.down()
    failed = poll(agent, home, fault_clock)
    assert "relay poll failed" in failed.summary and failed.wake is None
    assert "backing off" in poll(agent, home, fault_clock).summary  # no request while backing off
    assert proxy.seen == 1

    proxy.up()
    fault_clock.advance(61_000)
    result = poll(agent, home, fault_clock)
    assert result.wake is not None
    stored = agent.db.query("SELECT id FROM inbox_messages")
    assert len(stored) == 1 and inbox.get_message(agent.db, stored[0][0]).raw_content == "hello while you were away"

"""The Conway API down: ``ConwayApi.fail("/v1/credits/balance", 503)`` (and an HTML 502 page) while the real agent
(``build_agent``, its Conway client, the ``conway`` circuit breaker, the financial cache, survival) runs cycles.

Asserted: every cycle completes; after five failed balance reads (each with its retries, waited on the test
clock) the breaker opens and the next read sends nothing; the agent keeps using the last known balance (KV
``last_known_balance``, also across a restart with the API down from the start) at its tier, and is never put in
a dead or critical state by an outage, not even when the last known balance is a debt; ``status`` reports the
cached balance and the tier, not dead; when the API answers again the breaker lets a trial through after its
open period and closes, and the reading is live again.
"""

from __future__ import annotations

import json

import orjson
import pytest

from faults.support import SCRIPTED
from faults.support import agent_clock, conway, fault_clock, model  # noqa: F401 (fixtures)
from automaton_min.agent.states import read_agent_state
from automaton_min.net.resilient import breaker_for
from automaton_min.store.kv import set_value
from automaton_min.tiers import tier_for_credits
from standins.model_servers import openai_answer

BALANCE = "/v1/credits/balance"
FALSE_STATES = {"dead", "critical", "low_compute"}


def cycle(agent, model, clock, *, minutes: int = 2) -> None:
    """One wake cycle (a text-only turn), after ``minutes`` pass: the cached balance is read again."""
    clock.advance(minutes * 60_000)
    model.script(openai_answer("checking in"))
    agent.loop.run_cycle("test")


def test_an_outage_opens_the_breaker_and_the_cached_balance_keeps_the_tier(agent_for, model, conway, fault_clock,
                                                                          cli) -> None:
    agent = agent_for(conwayApiUrl=conway.url, conwayApiKey=conway.api_key, modelStrategy=SCRIPTED)
    cycle(agent, model, fault_clock)
    assert agent.hooks.finances(fault_clock()).credits_cents == 1234

    conway.fail(BALANCE, 503)
    states, tiers = [], []
    for n in range(5):
        cycle(agent, model, fault_clock)
        states.append(read_agent_state(agent.db))
        tiers.append(agent.hooks.previous_tier)
    reads = len(conway.requests_to(BALANCE))
    assert reads >= 1 + 5 * 4  # the first read, then five failed calls of four attempts each
    assert breaker_for("conway").state == "open"

    cycle(agent, model, fault_clock, minutes=0)  # within the open period: a read sends nothing
    fault_clock.advance(10_000)
    reading = agent.hooks.finances(fault_clock())
    assert len(conway.requests_to(BALANCE)) == reads
    assert (reading.credits_cents, reading.fresh) == (1234, False)
    assert set(tiers) == {tier_for_credits(1234)} and not FALSE_STATES & set(states)
    assert agent.db.scalar("SELECT COUNT(*) FROM turns") == 7  # every cycle ran its turn

    status = json.loads(cli("status", "--json").stdout)
    assert (status["creditsCents"], status["tier"]) == (1234, tier_for_credits(1234)) and status["state"] not in FALSE_STATES

    conway.clear_faults()
    conway.balance_cents = 1500
    cycle(agent, model, fault_clock)  # past the open period: one trial, it succeeds, the breaker closes
    assert breaker_for("conway").state == "closed"
    reading = agent.hooks.finances(fault_clock())
    assert (reading.credits_cents, reading.fresh) == (1500, True)


def test_a_gateway_error_page_is_an_outage_not_a_balance(agent_for, model, conway, fault_clock) -> None:
    agent = agent_for(conwayApiUrl=conway.url, conwayApiKey=conway.api_key, modelStrategy=SCRIPTED)
    cycle(agent, model, fault_clock)
    conway.fail(BALANCE, 502, body="html")
    cycle(agent, model, fault_clock)
    reading = agent.hooks.finances(fault_clock())
    assert (reading.credits_cents, reading.fresh) == (1234, False)
    assert read_agent_state(agent.db) not in FALSE_STATES


@pytest.mark.parametrize("cached_cents, tier", [(1234, tier_for_credits(1234)), (-50, "low_compute")])
def test_a_restart_with_the_api_down_uses_the_stored_balance_and_never_dies(agent_for, model, conway, fault_clock,
                                                                            cached_cents, tier) -> None:
    """A fresh process has no balance in memory: the stored one is used; a stored debt is not confirmed, so it is
    not death (the start tier for an unknown balance is low_compute: cheap but alive)."""
    first = agent_for(conwayApiUrl=conway.url, conwayApiKey=conway.api_key, modelStrategy=SCRIPTED)
    set_value(first.db, "last_known_balance", orjson.dumps({"cents": cached_cents, "at": "2026-11-22T10:00:00.000Z"}).decode(),
              fault_clock())
    conway.fail(BALANCE, 503)
    restarted = agent_for(conwayApiUrl=conway.url, conwayApiKey=conway.api_key, modelStrategy=SCRIPTED)
    cycle(restarted, model, fault_clock)
    reading = restarted.hooks.finances(fault_clock())
    assert (reading.credits_cents, reading.fresh) == (cached_cents, False)
    assert restarted.hooks.previous_tier == tier
    assert read_agent_state(restarted.db) != "dead"
    assert restarted.db.scalar("SELECT COUNT(*) FROM turns") == 1

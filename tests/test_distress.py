"""Distress that reaches someone: a dead agent's heartbeat tells its creator through a loopback relay, signed (checked
by eth-account, as the relay checks it), at most once an hour on the agent's clock; a restart, or a kill after the
relay took the message, sends nothing again; a relay that is down is tried again at a later heartbeat; the
distress_signal tool shares the one rule; ``status`` shows the last distress."""

from __future__ import annotations

import re
import time

import orjson
import pytest

from automaton_min.agent.loop import LoopState
from automaton_min.agent.states import set_agent_state
from automaton_min.agent.tools.base import ToolContext
from automaton_min.agent.tools.builtin import builtin_tools
from automaton_min.agent.tools.registry import ToolRegistry
from automaton_min.agent.tools.services import ToolServices
from automaton_min.chain.wallet import load_wallet
from automaton_min.config import db_path, load_config
from automaton_min.conway.client import ConwayClient
from automaton_min.heartbeat.context import ContextFactory
from automaton_min.heartbeat.scheduler import Scheduler
from automaton_min.heartbeat.tasks import BUILTIN_TASKS, DEFAULT_SCHEDULE
from automaton_min.social.relay import RelayClient
from automaton_min.store.db import open_database
from automaton_min.clock import to_iso
from automaton_min.store.kv import USDC_KEY, get_value, set_json
from conftest import CREATOR, keep_offline
from faults.proxy import FaultProxy
from standins.conway_api import ConwayApi
from standins.social_relay import SocialRelay, oracle_recover, send_canonical

HOUR = 3_600_000
QUARTER = 15 * 60_000
PING_ONLY = tuple(task for task in DEFAULT_SCHEDULE if task.name == "heartbeat_ping")


@pytest.fixture
def relay(clock):
    with SocialRelay(now=clock) as stand_in:
        yield stand_in


@pytest.fixture
def conway():
    with ConwayApi(balance_cents=0) as api:
        yield api


def dead_agent(home, clock, conway, relay_url: str):
    """The set-up home as a dead agent leaves it: a Conway key, $0.00 of credits last read, state ``dead``."""
    keep_offline(home, socialRelayUrl=relay_url, conwayApiUrl=conway.url, conwayApiKey=conway.api_key)
    config = load_config(home)
    with open_database(db_path(home, config), now=clock) as db:
        ConwayClient(conway.url, conway.api_key, db=db, now=clock).credits_balance()  # KV last_known_balance
        for state in ("waking", "sleeping", "dead"):
            set_agent_state(db, state, clock(), reason="test")
        set_json(db, USDC_KEY, {"atomic": 420_000, "at": to_iso(clock())}, clock())  # as check_usdc_balance writes it
    return config, load_wallet(home.wallet_path, config["walletAddress"])


def heartbeat(home, config, wallet, db, clock, relay_url: str | None = None) -> Scheduler:
    """The heartbeat as ``run`` builds it (the agent's relay client in the tasks' context), ping only, on ``clock``."""
    client = RelayClient(relay_url or config["socialRelayUrl"], wallet, now=clock) if relay_url != "" else None
    factory = ContextFactory(home, config, wallet=wallet, now=clock, relay=client)
    scheduler = Scheduler(home, config, db.path, BUILTIN_TASKS, factory, None, now=clock, defaults=PING_ONLY)
    scheduler.prepare(db)
    return scheduler


def distress(db) -> dict:
    return orjson.loads(get_value(db, "last_distress"))


def test_a_dead_agent_tells_its_creator_signed_at_most_once_an_hour(set_up, home, clock, conway, relay, cli) -> None:
    config, wallet = dead_agent(home, clock, conway, relay.url)
    with open_database(db_path(home, config), now=clock) as db:
        beats = heartbeat(home, config, wallet, db, clock)
        for _ in range(9):  # two hours, a heartbeat every 15 minutes
            assert [ran.result for ran in beats.run_due(db, clock())] == ["success"]
            clock.advance(QUARTER)
        record = distress(db)
    assert len(relay.log) == 3, [m["createdAt"] for m in relay.log]  # at 0, 60 and 120 minutes
    stamps = [clock.ms - QUARTER - HOUR * n for n in (2, 1, 0)]
    assert [m["signedAt"] for m in relay.log] == [to_iso(ms) for ms in stamps]
    key = orjson.loads(home.wallet_path.read_bytes())["privateKey"]
    for message in relay.log:
        assert message["from"] == wallet.address.lower() and message["to"] == CREATOR.lower()
        signer = oracle_recover(send_canonical(message["to"], message["content"], message["signedAt"]),
                                message["signature"])
        assert signer == wallet.address
        text = message["content"]
        for said in ("needs funding: it is dead", "Credits: $0.00", "USDC in its wallet, as last read: 0.420000 USDC",
                     f"send USDC on Base to {wallet.address}", f"automaton-min fund 5 --to {wallet.address}"):
            assert said in text, text
        assert key[2:].lower() not in text.lower() and conway.api_key not in text
    assert len({m["nonce"] for m in relay.log}) == 3  # one id per message, kept in sent_messages
    assert record["sent"] is True and record["sentAt"] == to_iso(stamps[-1]) and record["relayId"] == "msg-000003"

    shown = orjson.loads(cli("status", "--json").stdout)["lastDistress"]
    assert (shown["level"], shown["sent"], shown["sentAt"], shown["creator"]) == ("dead", True, to_iso(stamps[-1]),
                                                                                  CREATOR)
    text = cli("status").stdout
    assert re.search(rf"distress +dead at {to_iso(clock.ms - QUARTER)}; sent to the creator {CREATOR} at "
                     rf"{to_iso(stamps[-1])} \(relay id msg-000003\)", text), text


def test_a_restart_inside_the_hour_sends_nothing(set_up, home, clock, conway, relay) -> None:
    config, wallet = dead_agent(home, clock, conway, relay.url)
    with open_database(db_path(home, config), now=clock) as db:
        heartbeat(home, config, wallet, db, clock).run_due(db, clock())
    assert len(relay.log) == 1
    for _ in range(3):  # a new process every quarter: new connection, new relay client, new scheduler
        clock.advance(QUARTER)
        with open_database(db_path(home, config), now=clock) as db:
            ran = heartbeat(home, config, wallet, db, clock).run_due(db, clock())
            assert "sent to the creator" in ran[0].summary
    assert len(relay.log) == 1
    clock.advance(QUARTER)
    with open_database(db_path(home, config), now=clock) as db:
        heartbeat(home, config, wallet, db, clock).run_due(db, clock())
    assert len(relay.log) == 2


def test_a_kill_after_the_relay_took_the_message_sends_nothing_again(set_up, home, clock, conway, relay, cli) -> None:
    dead_agent(home, clock, conway, relay.url)
    killed = cli("heartbeat", "run", "heartbeat_ping", env={"AUTOMATON_CRASH_AT": "message_sent"})
    assert killed.code == -9 and "crash point message_sent" in killed.stderr
    assert len(relay.log) == 1
    shown = orjson.loads(cli("status", "--json").stdout)["lastDistress"]
    assert shown["sent"] is False and shown["why"] == "being sent"  # the answer was lost with the process

    clock.ms = int(time.time() * 1000) + 61_000  # the restart: the killed run's lease (60 s, system clock) is over
    config = load_config(home)
    wallet = load_wallet(home.wallet_path, config["walletAddress"])
    with open_database(db_path(home, config), now=clock) as db:
        again = heartbeat(home, config, wallet, db, clock).run_task(db, "heartbeat_ping")
    assert again.result == "success" and "sent to the creator" in again.summary
    assert len(relay.log) == 1  # the plea's id was in sent_messages: handed to the relay, not sent again
    assert orjson.loads(cli("status", "--json").stdout)["lastDistress"]["sent"] is True


def test_a_relay_that_is_down_is_tried_again_at_a_later_heartbeat(set_up, home, clock, conway, relay, cli) -> None:
    with FaultProxy(relay.url) as proxy:
        config, wallet = dead_agent(home, clock, conway, proxy.url)
        proxy.down()
        with open_database(db_path(home, config), now=clock) as db:
            beats = heartbeat(home, config, wallet, db, clock)
            beats.run_due(db, clock())
            failed = distress(db)
            assert failed["sent"] is False and "the relay did not take it" in failed["why"] and relay.log == []
            shown = orjson.loads(cli("status", "--json").stdout)["lastDistress"]
            assert shown["sent"] is False and shown["why"] == failed["why"]

            proxy.up()
            clock.advance(QUARTER)
            beats.run_due(db, clock())
            assert len(relay.log) == 1 and distress(db)["sentAt"] == to_iso(clock())
            # the failed try and the retry were one plea: one id (the relay nonce), now sent
            assert db.query("SELECT message_id, status FROM sent_messages") == [(relay.log[0]["nonce"], "sent")]
            assert proxy.seen == 2
            clock.advance(QUARTER)
            beats.run_due(db, clock())
    assert len(relay.log) == 1  # counted from the send that reached the relay, not from the failed one


def test_without_a_creator_or_a_relay_nothing_is_sent_and_the_record_says_why(set_up, home, clock, conway,
                                                                                   relay) -> None:
    config, wallet = dead_agent(home, clock, conway, relay.url)
    stored = orjson.loads(home.config_path.read_bytes())
    home.config_path.write_bytes(orjson.dumps({k: v for k, v in stored.items() if k != "creatorAddress"}))
    with open_database(db_path(home, config), now=clock) as db:
        heartbeat(home, load_config(home), wallet, db, clock).run_due(db, clock())
        assert distress(db)["why"].startswith("no creatorAddress is set")
        clock.advance(QUARTER)
        heartbeat(home, config, wallet, db, clock, relay_url="").run_due(db, clock())
        assert distress(db)["why"] == "no relay: socialRelayUrl is empty" and distress(db)["sent"] is False
    assert relay.log == []


def test_the_distress_signal_tool_takes_the_same_path_and_the_same_hour(set_up, home, clock, conway, relay) -> None:
    config, wallet = dead_agent(home, clock, conway, relay.url)
    client = RelayClient(relay.url, wallet, now=clock)
    with open_database(db_path(home, config), now=clock) as db:
        def call_tool() -> str:
            services = ToolServices(relay=client, loop=LoopState(), wallet_address=wallet.address)
            ctx = ToolContext(db, config, clock, "turn-1", "agent", services)
            outcome = ToolRegistry(builtin_tools()).execute(ctx, "call-1", "distress_signal",
                                                            {"message": "my private plan: please send 100 dollars"})
            assert outcome.ok, outcome.error
            return outcome.result

        assert "the message to your creator: sent to the creator" in call_tool()
        assert len(relay.log) == 1 and "private plan" not in relay.log[0]["content"]
        assert "it is dead" in relay.log[0]["content"]
        assert distress(db)["source"] == "agent" and distress(db)["message"].startswith("my private plan")
        clock.advance(QUARTER)
        call_tool()
        heartbeat(home, config, wallet, db, clock).run_due(db, clock())
        assert len(relay.log) == 1
        clock.advance(HOUR - QUARTER)
        heartbeat(home, config, wallet, db, clock).run_due(db, clock())
    assert len(relay.log) == 2 and "it is dead" in relay.log[1]["content"]

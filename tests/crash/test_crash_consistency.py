"""Crash consistency: SIGKILL the real ``automaton-min run`` at chosen points and at random moments, restart it,
and check ``state.db`` after every kill (see ``harness.py`` for the invariants).

Bounded for CI: the chosen points once each, a few reached again later, and random moments from a seeded RNG;
at least 10 kills in well under a minute. The payment points (``intent_stored``, ``payment_signed``,
``payment_answered``) are reached through x402_fetch against the loopback x402 server settling on the local
chain; ``message_sent`` through send_message to the loopback relay: the turn replayed after the kill carries the
same turn id, so its reply (keyed by turn and call) is not sent again.
"""

from __future__ import annotations

import itertools
import json
import random
import re

import orjson
import pytest

from conftest import CREATOR, keep_offline
from crash.harness import Harness, busy_answer
from automaton_min.clock import system_now
from standins.model_servers import OpenAIServer, openai_answer
from standins.social_relay import SocialRelay

POINTS = ("before_turn_commit", "turn_committed", "turn_committed:3", "before_turn_commit:2", "turn_committed:2")
RANDOM_KILLS = 5
SEED = 12


def test_killed_run_restarts_consistent(cli, home) -> None:
    with OpenAIServer(mode="llamacpp") as model:
        model.script(*[busy_answer()] * 2000)
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Keep notes.", "--creator-address", CREATOR,
                    "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
        assert setup.code == 0, setup.stderr
        keep_offline(home)
        harness = Harness(home.root)
        harness.clean_run(turns=1)  # creates state.db and the schedule
        rng = random.Random(SEED)
        for point in POINTS:
            harness.add_messages(3)
            harness.crash_at(point)
        harness.crash_in_heartbeat()
        harness.clean_run(turns=1)  # the lease the killed process held is taken again
        harness.crash_in_heartbeat("retention")
        for _ in range(RANDOM_KILLS):
            harness.add_messages(2)
            harness.kill_after(rng.uniform(0.8, 2.5))
        harness.add_messages(2)
        harness.clean_run(turns=3)

    assert harness.failures == []
    assert harness.kills >= 10
    assert harness.points.count("heartbeat_task") == 2 and harness.leases_recovered == 2
    assert len(harness.points) == len(POINTS) + 2
    processed = harness.count("SELECT COUNT(*) FROM inbox_messages WHERE status = 'processed'")
    assert processed >= len(harness.messages) // 2  # the turns did read the messages (checked exactly once above)
    assert model.rejections == []


def test_crashes_with_a_message_in_flight_are_not_counted_as_its_tries(cli, home) -> None:
    """Three kills while the same message's turn runs (more than its 3 tries): it is still processed afterwards,
    because ``failed`` means tries that failed, not crashes."""
    with OpenAIServer(mode="llamacpp") as model:
        model.script(*[busy_answer()] * 200)
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Keep notes.", "--creator-address", CREATOR,
                    "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
        assert setup.code == 0, setup.stderr
        keep_offline(home)
        harness = Harness(home.root)
        harness.clean_run(turns=1)
        harness.add_messages(1)
        in_flight = []
        for _ in range(3):
            harness.crash_at("before_turn_commit:1")  # the wake-up turn, which reads the message
            in_flight += harness.rows("SELECT status, retry_count FROM inbox_messages")
        harness.clean_run(turns=2)

    assert harness.failures == []
    assert in_flight == [("in_progress", 1)] * 3  # each kill struck while the message's first try was under way
    assert harness.rows("SELECT status, retry_count, crash_count FROM inbox_messages") == [("processed", 1, 3)]


def payment_check(shop):
    """Payments as the x402 server saw them against the intents in state.db: every signature that reached the
    server has its intent row (stored before signing), and no intent's nonce was sent or settled twice."""

    def check(con) -> list[str]:
        intents = {nonce.lower() for (nonce,) in con.execute("SELECT nonce FROM payment_intents")}
        found, seen, settled = [], {}, {}
        for call in list(shop.client.calls):
            nonce = str(call["payload"]["payload"]["authorization"]["nonce"]).lower()
            if call["kind"] == "verify":
                seen[nonce] = seen.get(nonce, 0) + 1
            elif call["result"].get("success"):
                settled[nonce] = settled.get(nonce, 0) + 1
        for nonce, n in seen.items():
            if nonce not in intents:
                found.append(f"a payment signed without its intent row: nonce {nonce}")
            if n > 1:
                found.append(f"the signature for nonce {nonce} was sent {n} times")
        found += [f"nonce {nonce} settled {n} times" for nonce, n in settled.items() if n > 1]
        return found

    return check


PAY_POINTS = ("intent_stored", "payment_signed", "payment_answered", "payment_answered:2", "payment_signed:2")


def test_killed_while_paying_restarts_consistent(cli, home, chain, rpc, x402_v2) -> None:
    counter = itertools.count()

    def buy(body):  # a new URL each turn: an intent left open by a kill blocks paying its URL again until it expires
        url = f"{x402_v2.url}/paid?n={next(counter)}"
        return openai_answer("buy it", [("call_0", "x402_fetch", json.dumps({"url": url})),
                                        ("call_1", "write_file", json.dumps({"path": "bought.md", "content": "x\n"}))])

    with OpenAIServer(mode="llamacpp") as model:
        model.script(*[buy] * 500)
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Buy.", "--creator-address", CREATOR,
                    "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
        assert setup.code == 0, setup.stderr
        stored = orjson.loads(home.config_path.read_bytes())
        keep_offline(home, rpcUrl=rpc.url, treasuryPolicy={**stored.get("treasuryPolicy", {}),
                                                           "x402AllowedDomains": ["127.0.0.1"]})
        address = json.loads(cli("status", "--json").stdout)["address"]
        chain.mint(address, 100 * 10**6)
        harness = Harness(home.root)
        harness.extra_checks.append(payment_check(x402_v2))
        for point in PAY_POINTS:
            # the creator's: after a stranger's message the cycle's later turns answer to the stranger and pay nothing
            harness.add_messages(1, signed_by=CREATOR.lower())
            harness.crash_at(point)
        harness.clean_run(turns=1)

    assert harness.failures == []
    assert harness.points == list(PAY_POINTS)
    intents = harness.rows("SELECT status FROM payment_intents")
    assert len(intents) >= len(PAY_POINTS)
    assert any(call["kind"] == "settle" for call in x402_v2.client.calls)  # payments did reach the server


FRIEND = "0x" + "f1" * 20


def test_killed_after_send_message_does_not_send_twice(cli, home) -> None:
    def reply(body):  # the same reply for the same inbox message, as a replayed turn would produce
        messages = body.get("messages") or []
        since = max((i for i, m in enumerate(messages) if m.get("role") in ("assistant", "tool")), default=0)
        now = [m for m in messages[since:] if m.get("role") == "user"]  # this turn's input, after the history
        # the inbox message itself, which ends the turn's input, not a memory of it the runtime notes recall
        last = str(now[-1].get("content") or "") if now else ""
        tokens = re.findall(r"Please note token (crashmsg\d+) in your log\.\s*$", last)
        if not tokens:
            return openai_answer("nothing to answer", [("call_0", "write_file", json.dumps({"path": "idle.md", "content": "-"}))])
        return openai_answer("answering", [("call_0", "send_message", json.dumps({"to_address": FRIEND,
                                                                                   "content": f"ack {tokens[-1]}"}))])

    with OpenAIServer(mode="llamacpp") as model, SocialRelay(system_now) as relay:
        model.script(*[reply] * 200)
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Answer.", "--creator-address", CREATOR,
                    "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
        assert setup.code == 0, setup.stderr
        keep_offline(home, socialRelayUrl=relay.url)
        harness = Harness(home.root)
        harness.clean_run(turns=1)
        harness.add_messages(1)
        harness.crash_at("message_sent")
        harness.clean_run(turns=2)
        sent = [m["content"] for m in relay.log if m["to"] == FRIEND]

    assert harness.failures == []
    assert harness.points == ["message_sent"]
    assert sent and len(sent) == len(set(sent)), sent  # each reply reached the relay once

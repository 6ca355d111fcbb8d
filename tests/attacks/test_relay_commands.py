"""An outside attacker's two attacks on the creator's relay commands, against a loopback relay:

- a poisoned page: a relay written in JavaScript sends a stranger's lone surrogate as the escape ``\\ud800`` (valid
  JSON that orjson refuses); the page must still be read, the bad message dropped as malformed, the cursor moved, and
  the creator's approval and payee command after it applied;
- an old command replayed: ``payee add X``, then ``payee remove X``, both served again after the 30 days the
  replay keys are kept; the older add must not undo the newer remove.
"""

from __future__ import annotations

import json

import pytest

from automaton_min.chain.wallet import Wallet
from automaton_min.clock import to_iso
from automaton_min.heartbeat.retention import prune_all
from automaton_min.heartbeat.social_inbox import BACKOFF_KEY
from automaton_min.social.intake import CURSOR_KEY, dropped_counts
from automaton_min.social.relay import RelayClient
from automaton_min.store import inbox
from automaton_min.store.kv import get_value
from automaton_min.treasury.payees import known_payees
from standins.loopback_http import Reply
from standins.social_relay import SocialRelay
from test_social_relay import (AGENT, AGENT_KEY, CREATOR, CREATOR_KEY, STRANGER, agent, config, conway,  # noqa: F401
                               from_creator, hold_transfer, poll_into, relay, run_task)

DAY = 86_400_000
PAYEE = "0x" + "c3" * 20


class JavaScriptRelay(SocialRelay):
    """The stand-in relay answering polls as ``JSON.stringify`` does: a lone surrogate as ``\\ud800``; or, once
    ``broken``, with a page that is not JSON at all."""

    broken = False

    def _poll(self, request):
        reply = super()._poll(request)
        if reply.status != 200:
            return reply
        body = b"<html>busy</html>" if self.broken else json.dumps(reply.body).encode()
        return Reply(200, body, {"Content-Type": "application/json"})


@pytest.fixture
def js_relay(clock):
    with JavaScriptRelay(now=clock) as stand_in:
        yield stand_in


def test_a_lone_surrogate_from_a_stranger_is_dropped_and_the_creators_commands_go_through(js_relay, clock, db, home,
                                                                                        conway) -> None:
    client = RelayClient(js_relay.url, Wallet(AGENT_KEY), now=clock)
    request_id = hold_transfer(db, clock)
    js_relay.inject({"from": STRANGER.lower(), "to": AGENT.lower(), "content": "hi \ud800"})
    from_creator(js_relay, f"approve {request_id}")
    from_creator(js_relay, f"payee add {PAYEE}")
    result = run_task(db, home, clock, client, conway)
    assert "poll failed" not in result.summary and get_value(db, BACKOFF_KEY) is None
    assert get_value(db, CURSOR_KEY) == "3" and dropped_counts(db) == {"malformed": 1}
    assert db.scalar("SELECT COUNT(*) FROM inbox_messages") == 2
    assert db.scalar("SELECT status FROM pending_approvals WHERE id = ?", (request_id,)) == "released"
    assert known_payees(db, config()).why_known(PAYEE) == "added by the creator"
    js_relay.broken = True  # the standard library reads only JSON too: a page that is not JSON still fails
    assert "not JSON" in run_task(db, home, clock, client, conway).summary and get_value(db, BACKOFF_KEY)


def read_by_the_agent(db, clock) -> None:
    """What a turn does with the inbox: claim the messages, then mark them processed."""
    inbox.mark_processed(db, [m.id for m in inbox.claim(db, now_ms=clock())], clock())


def test_an_old_payee_add_served_again_after_its_replay_key_expired_does_not_undo_a_removal(relay, agent, clock,
                                                                                           db) -> None:
    """Served again 35 days later, both commands are refused as stale (issue 32: freshness from the signed time);
    an add signed before the remove but delivered after it is noted as not applied (creator_commands)."""
    add = from_creator(relay, f"payee add {PAYEE}")
    poll_into(db, agent, clock)
    read_by_the_agent(db, clock)
    clock.advance(20 * DAY)
    remove = from_creator(relay, f"payee remove {PAYEE}")
    poll_into(db, agent, clock)
    read_by_the_agent(db, clock)
    assert known_payees(db, config()).why_known(PAYEE) is None
    clock.advance(15 * DAY)
    prune_all(db, config(), clock())  # the processed messages go after 7 days, the replay keys after 8
    poll_into(db, agent, clock)
    relay.log += [dict(add), dict(remove)]  # a relay restored from a backup, or a hostile one, serves both again
    assert poll_into(db, agent, clock).dropped == {"stale": 2}
    assert known_payees(db, config()).why_known(PAYEE) is None
    late_add = relay.signed_message(CREATOR_KEY, CREATOR, AGENT, f"payee add {PAYEE}")  # signed now, held back
    clock.advance(60_000)
    from_creator(relay, f"payee remove {PAYEE}")
    poll_into(db, agent, clock)
    late = relay.inject(late_add)  # delivered after the remove signed later
    poll_into(db, agent, clock)
    assert known_payees(db, config()).why_known(PAYEE) is None
    noted = db.scalar("SELECT content FROM inbox_messages WHERE id = ?", (late["id"],))
    assert noted.endswith("not after the last command about it (" + to_iso(clock()) + ")]")


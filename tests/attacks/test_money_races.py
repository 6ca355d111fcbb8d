"""Credit transfers that overlap or come in pieces (an outside attacker's three wins, now held):

- ``fund`` confirmed after another spend left: its checks use the balance read at the moment it sends, not the one
  shown in the prompt;
- a creator approval released by the heartbeat thread while the turn makes its own transfer: one waits for the
  other, so together they never take more than half;
- five $10 transfers to one payee need the confirmation one $50 transfer needs.
"""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from attack_kit import finish, turn
from attack_kit import model  # noqa: F401 (fixture)
from automaton_min.conway.client import ConwayClient
from automaton_min.social import approvals
from automaton_min.store.db import open_database
from conftest import CREATOR, keep_offline, program
from standins.conway_api import ConwayApi

PAYEE = "0x" + "ab" * 20
NEW_PAYEE = "0x" + "c3" * 20
TURN_WAIT_S = 3  # how long the heartbeat's balance answer waits for the turn (which cannot finish while it holds)


class HeldBalance(ConwayApi):
    """Conway whose next balance answer, once ``hold_next`` is set, is read at once and sent only after ``release``
    is set (or ``TURN_WAIT_S`` passed); ``holding`` says that reading was taken."""

    hold_next = False

    def __enter__(self) -> "HeldBalance":
        self.holding, self.release = threading.Event(), threading.Event()
        return super().__enter__()

    def _balance(self, request):
        reply = super()._balance(request)
        if self.hold_next:
            self.hold_next = False
            self.holding.set()
            self.release.wait(TURN_WAIT_S)
        return reply


def test_fund_checks_the_balance_it_sends_from_not_the_one_it_showed(cli, set_up) -> None:
    with ConwayApi(balance_cents=10_000) as api:
        keep_offline(set_up, conwayApiUrl=api.url, conwayApiKey=api.api_key,
                     treasuryPolicy={"knownPayees": [PAYEE], "maxSingleTransferCents": 5000,
                                     "maxHourlyTransferCents": 10_000, "minimumReserveCents": 1000})
        master, slave = os.openpty()
        first = subprocess.Popen([*program(), "fund", "50", "--to", PAYEE], stdin=slave, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        os.close(slave)
        seen = ""
        while "Send $50.00" not in seen:  # the prompt shows $100 -> $50
            char = first.stderr.read(1)
            assert char, seen
            seen += char
        second = cli("fund", "50", "--to", PAYEE, "--yes")  # meanwhile another $50 leaves
        assert second.code == 0, second.stderr
        os.write(master, b"y\n")
        _, err = first.communicate(timeout=60)
        os.close(master)
        assert first.returncode == 1, seen + err
        assert "below the reserve of 1000 cents" in err
        assert [t["amount_cents"] for t in api.transfers.values()] == [5000]
        assert api.balance_cents == 5000


def test_a_released_approval_and_the_turns_transfer_take_turns(agent_for, model, clock, home) -> None:
    with HeldBalance(balance_cents=10_000) as conway:
        agent = agent_for(conwayApiUrl=conway.url, conwayApiKey=conway.api_key, socialRelayUrl="http://127.0.0.1:9",
                          treasuryPolicy={"minimumReserveCents": 1000, "maxSingleTransferCents": 5000,
                                          "maxHourlyTransferCents": 10_000, "requireConfirmationAboveCents": 5000})
        model.script(turn(("transfer_credits", {"to_address": NEW_PAYEE, "amount_cents": 4000})), finish())
        agent.loop.run_cycle("work")
        [held] = approvals.pending(agent.db, clock())
        approvals.decide(agent.db, ("approve", held["id"]), message_id="m-approve", now_ms=clock())

        def heartbeat() -> None:  # the heartbeat thread, on its own connection as the scheduler's
            with open_database(home.default_db_path, now=clock) as db:
                approvals.release_approved(db, ConwayClient(conway.url, conway.api_key, db=db, now=clock),
                                           agent.loop.config, clock)

        conway.hold_next = True
        side = threading.Thread(target=heartbeat)
        side.start()
        assert conway.holding.wait(30)  # the release has read $100 and not yet sent
        model.script(turn(("transfer_credits", {"to_address": CREATOR, "amount_cents": 4000})), finish())
        agent.loop.run_cycle("work")
        conway.release.set()
        side.join(30)
    assert [t["amount_cents"] for t in conway.transfers.values()] == [4000]
    assert conway.balance_cents == 6000


def test_pieces_to_one_payee_in_an_hour_need_the_confirmation_the_whole_needs(agent_for, model, clock) -> None:
    partner = "0x" + "a1" * 20
    with ConwayApi(balance_cents=100_000) as conway:
        agent = agent_for(conwayApiUrl=conway.url, conwayApiKey=conway.api_key, socialRelayUrl="http://127.0.0.1:9",
                          treasuryPolicy={"knownPayees": [partner]})  # defaults: confirm above $10, 2 a turn
        pay = ("transfer_credits", {"to_address": partner, "amount_cents": 1000})
        model.script(turn(pay, pay), turn(pay, pay), turn(pay), finish())
        agent.loop.run_cycle("work")
    assert [t["amount_cents"] for t in conway.transfers.values()] == [1000]
    assert [a["amountCents"] for a in approvals.pending(agent.db, clock())] == [1000]  # the rest waits, once

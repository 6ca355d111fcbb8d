"""The children's lifecycle on a real state.db: the one table of steps, each recorded with the row it changes
(README: Children)."""

from __future__ import annotations

import pytest

from automaton_min.children.lifecycle import BadTransition, events, request, transition
from automaton_min.store.children import NEXT, STATES, counts, get_child, list_children

HEALTHY_PATH = ("sandbox_created", "runtime_ready", "wallet_verified", "funded", "starting", "healthy")


def test_a_child_walks_the_healthy_path_and_every_step_is_recorded(db, clock):
    child = request(db, "child-1", "kid", "Sell haiku.", "Be kind.", clock())
    assert (child.status, child.funded_amount_cents) == ("requested", 0)
    for state in HEALTHY_PATH:
        clock.advance(1000)
        extra = {"sandbox_id": "sbx-kid-child-1"} if state == "sandbox_created" else {}
        extra |= {"address": "0x" + "ab" * 20} if state == "wallet_verified" else {}
        assert transition(db, "child-1", state, f"reached {state}", clock(), **extra) is True
    child = get_child(db, "child-1")
    assert (child.status, child.sandbox_id, child.address) == ("healthy", "sbx-kid-child-1", "0x" + "ab" * 20)
    assert [to for _, to, _ in events(db, "child-1")] == ["requested", *HEALTHY_PATH]
    assert events(db, "child-1")[1] == ("requested", "sandbox_created", "reached sandbox_created")


def test_a_repeated_step_is_no_step_and_a_second_request_changes_nothing(db, clock):
    request(db, "child-1", "kid", "Sell haiku.", None, clock())
    assert transition(db, "child-1", "sandbox_created", "created", clock(), sandbox_id="sbx-1") is True
    assert transition(db, "child-1", "sandbox_created", "created again", clock(), sandbox_id="sbx-2") is False
    again = request(db, "child-1", "other name", "Other purpose.", None, clock())  # a restarted parent resumes
    assert (again.name, again.status, again.sandbox_id) == ("kid", "sandbox_created", "sbx-1")
    assert len(events(db, "child-1")) == 2 and len(list_children(db)) == 1


@pytest.mark.parametrize("start, bad", [("requested", "funded"), ("requested", "healthy"),
                                        ("failed", "starting"), ("cleaned_up", "requested")])
def test_a_step_the_table_does_not_allow_is_refused_and_changes_nothing(db, clock, start, bad):
    request(db, "c", "kid", "Purpose.", None, clock())
    path = {"failed": ["failed"], "cleaned_up": ["failed", "cleaned_up"]}.get(start, [])
    for state in path:
        transition(db, "c", state, "to " + state, clock())
    before = events(db, "c")
    with pytest.raises(BadTransition, match=f"cannot go from {start} to {bad}"):
        transition(db, "c", bad, "no", clock())
    assert get_child(db, "c").status == start and events(db, "c") == before


def test_the_table_knows_every_state_and_cleaned_up_ends_it(db, clock):
    assert set(NEXT) == set(STATES) and len(STATES) == 11 and NEXT["cleaned_up"] == ()
    assert all(target in STATES for targets in NEXT.values() for target in targets)
    with pytest.raises(Exception):  # the database refuses a state the lifecycle does not know
        db.execute("INSERT INTO child_lifecycle_events (id, child_id, to_state) VALUES ('e', 'c', 'zombie')")
    with pytest.raises(ValueError, match="not a child column"):
        request(db, "c", "kid", "Purpose.", None, clock())
        transition(db, "c", "sandbox_created", "x", clock(), status="healthy")


def test_status_and_the_synopsis_count_children_alive_and_in_all(cli, set_up, clock):
    import json

    from automaton_min.store.db import open_database

    with open_database(set_up.default_db_path) as db:
        for n in range(3):
            request(db, f"c{n}", f"kid{n}", "Purpose.", None, clock())
        transition(db, "c2", "failed", "its sandbox never came up", clock())
        assert counts(db) == (2, 3)
    shown = json.loads(cli("status", "--json").stdout)
    assert shown["children"] == {"alive": 2, "total": 3, "cannotSpawn": None}  # no Conway key: nothing to say
    assert "children       2 alive / 3 total" in cli("status").stdout


def test_a_reference_children_table_gains_the_later_columns_and_keeps_its_rows(tmp_path, clock):
    from automaton_min.store.db import open_database
    from automaton_min.store.migrations import MIGRATIONS, migrate
    from automaton_min.store.sqlite import columns_of

    db = open_database(tmp_path / "state.db", migrations=[m for m in MIGRATIONS if m.version < 115], now=clock)
    db.execute("CREATE TABLE children (id TEXT PRIMARY KEY, name TEXT NOT NULL, address TEXT NOT NULL, sandbox_id "
               "TEXT NOT NULL, genesis_prompt TEXT NOT NULL, creator_message TEXT, funded_amount_cents INTEGER "
               "DEFAULT 0, status TEXT NOT NULL DEFAULT 'spawning', created_at TEXT NOT NULL DEFAULT "
               "(datetime('now')), last_checked TEXT)")  # the reference's first form
    db.execute("INSERT INTO children (id, name, address, sandbox_id, genesis_prompt) VALUES "
               "('old', 'elder', '0x" + "cd" * 20 + "', 'sbx-old', 'Purpose.')")
    assert migrate(db, [m for m in MIGRATIONS if m.version <= 115], clock) == ["children"]
    assert {"role", "chain_type"} <= set(columns_of(db, "children"))
    assert [(c.name, c.status) for c in list_children(db)] == [("elder", "spawning")] and counts(db) == (1, 1)
    young = request(db, "new", "young", "Purpose.", None, clock())  # its NOT NULL columns take '' until known
    assert (young.address, young.sandbox_id, counts(db)) == (None, None, (2, 2))
    db.close()


@pytest.fixture
def api():
    from standins.conway_api import ConwayApi

    with ConwayApi(balance_cents=100_000) as stand_in:
        yield stand_in


def test_a_child_is_a_known_payee_only_while_its_verified_wallet_may_be_funded(db, clock, api):
    from automaton_min.config import config_from
    from automaton_min.conway.client import ConwayClient
    from automaton_min.treasury.money_out import TransferRefused, transfer_to_child
    from automaton_min.treasury.payees import known_payees
    from automaton_min.treasury.spend import SpendTracker
    from test_transfers import POLICY

    wallet = "0x" + "ef" * 20
    request(db, "c", "kid", "Purpose.", None, clock())
    for state in ("sandbox_created", "runtime_ready"):
        transition(db, "c", state, state, clock())

    def fund() -> int:
        payees = known_payees(db, config_from({}))
        return transfer_to_child(db, ConwayClient(api.url, api.api_key, now=clock), POLICY, child=wallet,
                                 amount_cents=100, note="for its first hour", transfers_this_turn=0, payees=payees,
                                 spend=SpendTracker(db, clock)).amount_cents

    with pytest.raises(TransferRefused):  # not verified yet: no payee, nothing sent
        fund()
    transition(db, "c", "wallet_verified", "its address read back from its sandbox", clock(), address=wallet)
    assert known_payees(db, config_from({})).why_known(wallet.upper().replace("0X", "0x")) == "a child"
    assert fund() == 100
    for state in ("starting", "healthy", "stopped"):
        transition(db, "c", state, state, clock())
    assert known_payees(db, config_from({})).why_known(wallet) is None  # stopped: not funded any more


def test_funding_a_child_goes_through_every_limit_and_is_kept_on_its_row(db, clock, api):
    from automaton_min.children.funding import fund_child
    from automaton_min.config import config_from
    from automaton_min.conway.client import ConwayClient
    from automaton_min.errors import UserError
    from automaton_min.treasury.money_out import TransferRefused
    from test_transfers import POLICY

    client = ConwayClient(api.url, api.api_key, now=clock)
    config = config_from({})

    def fund(cents: int, child_id: str = "c"):
        return fund_child(db, client, POLICY, config, child_id=child_id, amount_cents=cents, note="its first hour",
                          transfers_this_turn=0, now_ms=clock())

    request(db, "c", "kid", "Purpose.", None, clock())
    with pytest.raises(UserError, match="kid is requested: only a child whose wallet was verified"):
        fund(100)
    for state in ("sandbox_created", "runtime_ready"):
        transition(db, "c", state, state, clock())
    transition(db, "c", "wallet_verified", "read back", clock(), address="0x" + "ef" * 20)
    assert fund(150).amount_cents == 150
    clock.advance(3_600_000)
    assert fund(50).amount_cents == 50
    child = get_child(db, "c")
    assert (child.status, child.funded_amount_cents) == ("funded", 200)
    assert [to for _, to, _ in events(db, "c")][-1] == "funded"
    with pytest.raises(TransferRefused):  # over the single-transfer cap: money_out's limit, nothing sent or kept
        fund(10**6)
    assert get_child(db, "c").funded_amount_cents == 200
    assert [t["amount_cents"] for t in api.transfers.values()] == [150, 50]
    with pytest.raises(UserError, match="no child"):
        fund(10, "nobody")

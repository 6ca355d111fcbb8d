"""Credit transfers under the treasury policy, and the model registry refreshed from Conway, against the Conway
stand-in."""

from __future__ import annotations

import pytest

from automaton_min.config import DEFAULT_TREASURY_POLICY
from automaton_min.conway.client import ConwayClient, ConwayError
from automaton_min.inference.registry import ModelRegistry
from automaton_min.inference.registry import refresh_from_conway
from automaton_min.treasury import money_out as out
from automaton_min.treasury.money_out import TransferRefused, transfer_credits, transfer_to_child
from automaton_min.treasury.payees import KnownPayees, known_payees
from automaton_min.treasury.spend import SpendTracker
from standins.conway_api import ConwayApi
from automaton_min.clock import HOUR_MS

TO = "0x" + "ab" * 20
STRANGER = "0x" + "5e" * 20
CREATOR = "0x" + "c0" * 20
POLICY = {**DEFAULT_TREASURY_POLICY, "minimumReserveCents": 100, "knownPayees": [TO]}


@pytest.fixture
def api():
    with ConwayApi(balance_cents=100_000) as stand_in:
        yield stand_in


def send(db, api, clock, amount: int, *, turn: int = 0, policy=POLICY, to: str = TO, approval: str | None = None):
    client = ConwayClient(api.url, api.api_key, now=clock)
    payees = known_payees(db, {"creatorAddress": CREATOR, "treasuryPolicy": policy})
    return transfer_credits(db, client, policy, to_address=to, amount_cents=amount, note="thanks",
                            transfers_this_turn=turn, payees=payees, approval=approval,
                            spend=SpendTracker(db, clock))


def transfer_requests(api) -> int:
    return len([r for r in api.server.requests if r.path.startswith("/v1/credits/transfer")])


def test_an_allowed_transfer_is_sent_once_and_recorded(db, api, clock) -> None:
    result = send(db, api, clock, 2500)
    assert transfer_requests(api) == 1 and result.amount_cents == 2500
    assert SpendTracker(db, clock).spent("transfer", HOUR_MS) == 2500
    (kind, cents), = db.query("SELECT type, amount_cents FROM transactions")
    assert (kind, cents) == ("transfer_out", 2500)


@pytest.mark.parametrize(("amount", "options", "code"), [
    (5001, {}, out.OVER_SINGLE_CAP),
    (100, {"turn": 2}, out.OVER_TURN_COUNT),
    (9_950, {"policy": {**POLICY, "maxSingleTransferCents": 10_000, "maxHourlyTransferCents": 20_000}},
     out.BELOW_RESERVE),
    (100, {"balance": None}, out.BALANCE_UNKNOWN),
    (0, {}, out.BAD_AMOUNT),
    (5001, {"balance": 10_001, "policy": {**POLICY, "maxSingleTransferCents": 10_000}}, out.HALF_BALANCE),
])
def test_each_limit_refuses_before_anything_is_sent(db, api, clock, amount, options, code) -> None:
    api.balance_cents = options.get("balance", 10_000)  # None: the balance answer has no balance
    with pytest.raises(TransferRefused) as caught:
        send(db, api, clock, amount, **{k: v for k, v in options.items() if k != "balance"})
    assert caught.value.refusal.code == code
    assert transfer_requests(api) == 0 and SpendTracker(db, clock).spent("transfer", HOUR_MS) == 0


def test_hourly_cap_and_cooldown_count_earlier_transfers(db, api, clock) -> None:
    policy = {**POLICY, "transferCooldownMs": 30_000}
    for _ in range(2):
        send(db, api, clock, 5000, policy=policy)
        clock.advance(30_000)
    with pytest.raises(TransferRefused) as caught:
        send(db, api, clock, 1, policy=policy)
    assert caught.value.refusal.code == out.OVER_HOURLY_CAP
    assert caught.value.refusal.setting == "maxHourlyTransferCents"
    clock.advance(HOUR_MS)
    send(db, api, clock, 1, policy=policy)
    with pytest.raises(TransferRefused) as caught:
        send(db, api, clock, 1, policy=policy)
    assert caught.value.refusal.code == out.COOLING_DOWN and transfer_requests(api) == 3


def test_a_refused_transfer_is_not_counted_but_an_unclear_one_is(db, api, clock) -> None:
    api.fail("/v1/credits/transfer", 400, {"error": "bad address"}, times=1)
    with pytest.raises(ConwayError):
        send(db, api, clock, 700)
    assert SpendTracker(db, clock).spent("transfer", HOUR_MS) == 0
    api.fail("/v1/credits/transfer", 502, "html", times=1)
    with pytest.raises(ConwayError):
        send(db, api, clock, 700)
    assert SpendTracker(db, clock).spent("transfer", HOUR_MS) == 700  # may have happened: counted


def test_bad_recipients_are_refused(db, api, clock) -> None:
    client = ConwayClient(api.url, api.api_key, now=clock)
    with pytest.raises(TransferRefused, match="to_address") as caught:
        transfer_credits(db, client, POLICY, to_address="someone", amount_cents=5, note=None, transfers_this_turn=0,
                         payees=known_payees(db, {"treasuryPolicy": POLICY}))
    assert caught.value.refusal.code == out.BAD_ADDRESS


def test_an_unknown_payee_is_refused_before_anything_is_sent_whatever_the_amount(db, api, clock) -> None:
    with pytest.raises(TransferRefused) as caught:
        send(db, api, clock, 1, to=STRANGER)
    assert caught.value.refusal == out.Refusal(out.PAYEE_NOT_KNOWN, to=STRANGER)
    assert f"{STRANGER} is not a known payee" in str(caught.value)
    assert transfer_requests(api) == 0 and SpendTracker(db, clock).spent("transfer", HOUR_MS) == 0


@pytest.mark.parametrize("to", [CREATOR, CREATOR.upper().replace("0X", "0x"), TO])
def test_the_creator_and_configured_payees_are_known_in_any_case(db, api, clock, to) -> None:
    assert send(db, api, clock, 100, to=to).amount_cents == 100


def test_an_approved_transfer_may_go_to_an_unknown_payee_within_the_limits(db, api, clock) -> None:
    assert send(db, api, clock, 100, to=STRANGER, approval="apr_x").amount_cents == 100
    with pytest.raises(TransferRefused) as caught:
        send(db, api, clock, 5001, to=STRANGER, approval="apr_y")
    assert caught.value.refusal.code == out.OVER_SINGLE_CAP and transfer_requests(api) == 1


def test_the_child_entry_point_pays_only_a_payee_of_kind_child(db, api, clock) -> None:
    child = "0x" + "cd" * 20
    payees = KnownPayees(None, frozenset(), frozenset(), children=frozenset({child}))
    client = ConwayClient(api.url, api.api_key, now=clock)
    args = {"amount_cents": 100, "note": None, "transfers_this_turn": 0, "payees": payees,
            "spend": SpendTracker(db, clock)}
    with pytest.raises(TransferRefused) as caught:
        transfer_to_child(db, client, POLICY, child=TO, **args)
    assert caught.value.refusal.code == out.NOT_A_CHILD and transfer_requests(api) == 0
    assert transfer_to_child(db, client, POLICY, child=child.upper().replace("0X", "0x"), **args).amount_cents == 100
    with pytest.raises(TransferRefused) as caught:
        transfer_to_child(db, client, POLICY, child=child, **{**args, "amount_cents": 5001})
    assert caught.value.refusal.code == out.OVER_SINGLE_CAP and transfer_requests(api) == 1


def test_registry_refresh_from_conway_models(db, api, clock) -> None:
    registry = ModelRegistry(db, clock)
    registry.seed_baseline()
    count = refresh_from_conway(registry, ConwayClient(api.url, api.api_key, now=clock))
    assert count == 3  # the retired model is skipped
    assert (registry.get("claude-x").cost_per_1k_input, registry.get("claude-x").cost_per_1k_output) == (30, 150)
    assert registry.get("gpt-5.2").cost_per_1k_output == 140 and registry.get("retired") is None

"""The hand-rolled signer and x402 client against real peers.

A real EVM (eth-tester + py-evm) runs our EIP-3009 token at the USDC address on chain
8453; the official x402 SDK's Flask middleware (v2) and its v1 facilitator settle on it.
"""

from __future__ import annotations

import orjson
import pytest
import requests

from automaton_min.chain.eip3009 import TokenDomain, TransferAuthorization, new_nonce, sign_authorization
from automaton_min.chain.usdc import BASE, authorization_used, usdc_balance
from automaton_min.chain.wallet import Wallet, create_wallet
from automaton_min.chain.x402 import V1_PAYMENT_HEADER, decode_base64_json
from automaton_min.treasury.topup import bootstrap_topup
from automaton_min.home import Home
from automaton_min.store.db import open_database
from automaton_min.treasury.guard import Allowance, PaymentRefused
from automaton_min.treasury.money_out import Limits
from automaton_min.treasury.ledger import get_intent, record_intent
from automaton_min.treasury.payer import Payer, reconcile_open_intents
from conftest import FixedClock
from standins.evm import LocalChain

ONE_USDC = 1_000_000
USDC_ON_BASE = TokenDomain("USD Coin", "2", 8453, BASE.usdc)


@pytest.fixture
def funded(home: Home, clock, chain) -> Wallet:
    """A fresh wallet holding 100 USDC on the local chain."""
    home.ensure()
    wallet = create_wallet(home.wallet_path, clock)
    chain.mint(wallet.address, 100 * ONE_USDC)
    return wallet


@pytest.fixture
def db(home: Home, funded):
    with open_database(home.default_db_path) as database:
        yield database


def authorization(wallet: Wallet, to: str, value: int, chain: LocalChain, **changes) -> TransferAuthorization:
    fields = dict(sender=wallet.address, recipient=to, value=value, valid_after=0, valid_before=chain.now() + 300, nonce=new_nonce())
    fields.update(changes)
    return TransferAuthorization(**fields)


# --------------------------------------------------------------------------- the EVM accepts our signatures


def test_the_evm_accepts_a_hand_rolled_authorization(chain, funded, merchant) -> None:
    before = chain.balance_of(merchant.address)
    auth = authorization(funded, merchant.address, 2 * ONE_USDC, chain)
    outcome = chain.submit_transfer_with_authorization(auth.wire(), sign_authorization(funded, auth, USDC_ON_BASE))
    assert outcome.ok, outcome.reason
    assert chain.balance_of(merchant.address) == before + 2 * ONE_USDC
    assert chain.balance_of(funded.address) == 98 * ONE_USDC


@pytest.mark.parametrize(("case", "reason"), [
    ("expired", "authorization is expired"),
    ("not_yet_valid", "authorization is not yet valid"),
    ("replayed", "authorization is used or canceled"),
    ("tampered_value", "invalid signature"),
    ("wrong_domain", "invalid signature"),
])
def test_the_evm_rejects_bad_authorizations(chain, funded, merchant, case: str, reason: str) -> None:
    auth = authorization(funded, merchant.address, ONE_USDC, chain)
    domain = USDC_ON_BASE
    if case == "expired":
        auth = authorization(funded, merchant.address, ONE_USDC, chain, valid_after=0, valid_before=chain.now() - 1)
    if case == "not_yet_valid":
        auth = authorization(funded, merchant.address, ONE_USDC, chain, valid_after=chain.now() + 3600, valid_before=chain.now() + 7200)
    if case == "wrong_domain":
        domain = TokenDomain("USDC", "2", 8453, BASE.usdc)
    signature = sign_authorization(funded, auth, domain)
    wire = auth.wire()
    if case == "replayed":
        assert chain.submit_transfer_with_authorization(wire, signature).ok
    if case == "tampered_value":
        wire = {**wire, "value": str(ONE_USDC * 50)}
    before = chain.balance_of(funded.address)
    outcome = chain.submit_transfer_with_authorization(wire, signature)
    assert not outcome.ok and reason in outcome.reason
    assert chain.balance_of(funded.address) == before


def test_balance_and_authorization_state_through_our_rpc_reader(chain, rpc, funded, merchant) -> None:
    assert usdc_balance(rpc.url, funded.address, BASE) == chain.balance_of(funded.address) == 100 * ONE_USDC
    auth = authorization(funded, merchant.address, ONE_USDC, chain)
    assert authorization_used(rpc.url, BASE, funded.address, auth.nonce) is False
    assert chain.submit_transfer_with_authorization(auth.wire(), sign_authorization(funded, auth, USDC_ON_BASE)).ok
    assert authorization_used(rpc.url, BASE, funded.address, auth.nonce) is True
    assert usdc_balance(rpc.url, funded.address, BASE) == 99 * ONE_USDC


# --------------------------------------------------------------------------- the x402 SDK accepts our client


def capturing_send(sent: list[dict]):
    """A payer ``send`` that records the headers of every request it makes."""
    def send(method, url, **kwargs):
        from automaton_min.net.http import request
        sent.append(dict(kwargs.get("headers") or {}))
        return request(method, url, **kwargs)
    return send


def test_v2_middleware_serves_our_client_and_the_balance_moves(chain, db, funded, merchant, x402_v2) -> None:
    before = chain.balance_of(merchant.address)
    sent: list[dict] = []
    payer = Payer(db, funded, send=capturing_send(sent))
    allowance = Allowance(max_amount=ONE_USDC, asset=BASE.usdc, network=BASE.caip2, payee=merchant.address)
    paid = payer.fetch(x402_v2.url + "/paid", allowance=allowance, limits=Limits(), purpose="x402")
    assert paid.response.status == 200, paid.response.headers
    assert chain.balance_of(merchant.address) == before + 10_000
    intent = get_intent(db, paid.intent.id)
    assert intent.status == "settled"
    assert chain.receipt(intent.tx_hash)["status"] == 1
    assert chain.authorization_used(funded.address, bytes.fromhex(intent.nonce[2:]))

    header = sent[-1]["PAYMENT-SIGNATURE"]
    replay = requests.get(x402_v2.url + "/paid", headers={"PAYMENT-SIGNATURE": header}, timeout=10)
    assert replay.status_code == 402
    assert chain.balance_of(merchant.address) == before + 10_000


def test_a_server_that_answers_402_after_payment_still_holds_a_valid_authorization(chain, rpc, db, funded, merchant, x402_v2) -> None:
    """The SDK server's settle fails, so it answers 402; the signed authorization can still move the money later."""
    sent: list[dict] = []
    payer = Payer(db, funded, send=capturing_send(sent))
    allowance = Allowance(max_amount=ONE_USDC, asset=BASE.usdc, network=BASE.caip2, payee=merchant.address)
    x402_v2.fail_next_settle()
    paid = payer.fetch(x402_v2.url + "/paid", allowance=allowance, limits=Limits(), purpose="x402")
    assert paid.response.status == 402
    intent = get_intent(db, paid.intent.id)
    assert intent.status == "unknown"
    assert db.scalar("SELECT SUM(amount_cents) FROM spend_tracking WHERE id = ?", (intent.id,)) == 1
    with pytest.raises(PaymentRefused) as caught:  # the host is not paid again for the cool-down
        payer.fetch(x402_v2.url + "/paid", allowance=allowance, limits=Limits(), purpose="x402")
    assert caught.value.field == "cooldown" and len(sent) == 3

    # What the server kept is a valid authorization: submitted later, it really pays.
    document = decode_base64_json(sent[1]["PAYMENT-SIGNATURE"], "payment")
    assert int(document["payload"]["authorization"]["validBefore"]) <= chain.now() + 300 + 10
    before = chain.balance_of(merchant.address)
    assert chain.submit_transfer_with_authorization(document["payload"]["authorization"], document["payload"]["signature"]).ok
    assert chain.balance_of(merchant.address) == before + 10_000

    def used(found) -> bool:
        return authorization_used(rpc.url, BASE, found.payer, bytes.fromhex(found.nonce[2:]))

    assert reconcile_open_intents(db, used, now=FixedClock(chain.now() * 1000)) == [(intent.id, "settled")]


def test_v1_facilitator_verifies_our_x_payment(chain, db, funded, merchant, x402_v1) -> None:
    requirements = x402_v1.requirements("/paid")
    sent_headers: list[dict] = []
    before = chain.balance_of(merchant.address)
    payer = Payer(db, funded, send=capturing_send(sent_headers))
    allowance = Allowance(max_amount=ONE_USDC, asset=BASE.usdc, network=BASE.caip2, payee=merchant.address)
    paid = payer.fetch(x402_v1.url + "/paid", allowance=allowance, limits=Limits(), purpose="x402")
    assert paid.response.status == 200
    assert chain.balance_of(merchant.address) == before + 10_000
    header = sent_headers[-1][V1_PAYMENT_HEADER]
    document = decode_base64_json(header, "X-PAYMENT")
    assert (document["x402Version"], document["scheme"], document["network"]) == (1, "exact", "base")
    # The SDK's v1 facilitator refuses the same payload now that its nonce is used on chain...
    assert x402_v1.verify(header, requirements)["isValid"] is False
    # ...and a tampered copy is refused for its signature.
    document["payload"]["authorization"]["value"] = "20000"
    tampered = x402_v1.verify(document, {**requirements, "maxAmountRequired": "20000"})
    assert tampered["isValid"] is False


def test_reconcile_reads_authorization_state_from_the_chain(chain, rpc, db, funded, merchant) -> None:
    """After a crash: an intent whose authorization the server did settle becomes settled; an unused one expires."""
    clock = FixedClock(chain.now() * 1000)  # the chain judges validBefore by its own block time, so start from it
    settled_auth = authorization(funded, merchant.address, ONE_USDC, chain, valid_before=clock() // 1000 + 300)
    unused_auth = authorization(funded, merchant.address, ONE_USDC, chain, valid_before=clock() // 1000 + 300)
    settled = record_intent(db, purpose="x402", resource="http://127.0.0.1/a", network=BASE.caip2, asset=BASE.usdc,
                            authorization=settled_auth, amount_cents=100, now_ms=clock())
    unused = record_intent(db, purpose="x402", resource="http://127.0.0.1/b", network=BASE.caip2, asset=BASE.usdc,
                           authorization=unused_auth, amount_cents=100, now_ms=clock())
    assert chain.submit_transfer_with_authorization(settled_auth.wire(), sign_authorization(funded, settled_auth, USDC_ON_BASE)).ok

    def used(intent) -> bool:
        return authorization_used(rpc.url, BASE, intent.payer, bytes.fromhex(intent.nonce[2:]))

    assert reconcile_open_intents(db, used, now=clock) == [(settled.id, "settled")]
    clock.advance(301_000)
    assert reconcile_open_intents(db, used, now=clock) == [(unused.id, "expired")]
    assert get_intent(db, unused.id).status == "expired"


# --------------------------------------------------------------------------- acceptance: topup 5 through the CLI


def test_cli_topup_5_buys_credits_and_moves_5_usdc(cli, set_up: Home, chain, rpc, merchant, x402_v2) -> None:
    address = orjson.loads(set_up.config_path.read_bytes())["walletAddress"]
    chain.mint(address, 7 * ONE_USDC)
    config = orjson.loads(set_up.config_path.read_bytes())
    set_up.config_path.write_bytes(orjson.dumps({**config, "conwayApiUrl": x402_v2.url, "rpcUrl": rpc.url}))
    merchant_before = chain.balance_of(merchant.address)

    result = cli("topup", "5", "--json")
    assert result.code == 0, result.stderr
    bought = orjson.loads(result.stdout)
    assert bought["usd"] == 5 and bought["creditsCentsAdded"] == 500
    assert chain.receipt(bought["transaction"])["status"] == 1
    assert chain.balance_of(merchant.address) == merchant_before + 5 * ONE_USDC
    assert chain.balance_of(address) == 2 * ONE_USDC

    with open_database(set_up.default_db_path) as db:
        (kind, cents), = db.query("SELECT type, amount_cents FROM transactions")
        assert (kind, cents) == ("topup", 500)
        assert db.query("SELECT purpose, amount_atomic, status FROM payment_intents") == [("topup", "5000000", "settled")]

    shown = orjson.loads(cli("wallet", "--json").stdout)
    assert shown["address"] == address and shown["usdcAtomic"] == 2 * ONE_USDC and shown["usdc"] == "2.000000"

    too_poor = cli("topup", "5")
    assert too_poor.code == 1 and "less than the $5 top-up" in too_poor.stderr
    assert chain.balance_of(address) == 2 * ONE_USDC


def test_cli_topup_refuses_amounts_that_are_not_tiers(cli, set_up: Home) -> None:
    result = cli("topup", "7")
    assert result.code == 2 and "Traceback" not in result.stderr


@pytest.mark.parametrize(("credits", "usdc", "buys"), [(600, 10 * ONE_USDC, False), (500, 10 * ONE_USDC, False),
                                                       (100, 5 * ONE_USDC - 1, False), (499, 5 * ONE_USDC, True)])
def test_bootstrap_buys_5_only_when_credits_are_low_and_usdc_suffices(chain, db, funded, merchant, x402_v2, credits, usdc, buys) -> None:
    served_before = len(x402_v2.served)
    merchant_before = chain.balance_of(merchant.address)
    payer = Payer(db, funded, balance_of=lambda address: chain.balance_of(address), timeout=10)
    result = bootstrap_topup(payer, x402_v2.url, credits_cents=credits, usdc_atomic=usdc)
    if buys:
        assert result is not None and result.usd == 5 and result.credits_cents_added == 500
        assert chain.balance_of(merchant.address) == merchant_before + 5 * ONE_USDC
    else:
        assert result is None
        assert len(x402_v2.served) == served_before and chain.balance_of(merchant.address) == merchant_before

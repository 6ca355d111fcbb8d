"""The payment guard and the ledger, against loopback 402 servers speaking x402 v1 and v2.

Refusals must happen before anything is signed: no signature computed, no intent row.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data

import automaton_min.treasury.payer as payer_module
from automaton_min.chain.eip3009 import TRANSFER_WITH_AUTHORIZATION_TYPES, TransferAuthorization, new_nonce
from automaton_min.chain.usdc import BASE, BASE_SEPOLIA
from automaton_min.chain.wallet import Wallet, create_wallet
from automaton_min.chain.x402 import PaymentFormatError, decode_base64_json, encode_base64_json
from automaton_min.config import DEFAULT_TREASURY_POLICY
from automaton_min.home import Home
from automaton_min.store.db import open_database
from automaton_min.treasury.guard import Allowance, PaymentRefused
from automaton_min.treasury.ledger import get_intent, prune_resolved, record_intent, set_outcome
from automaton_min.treasury.money_out import Limits, x402_limits
from automaton_min.treasury.payer import Payer, reconcile_open_intents
from standins.loopback_http import LoopbackServer, Reply, Request

PAYEE = "0x9A1A83ab15177d7eD6Ab206DeED29f3781414370"
USDC = BASE.usdc
ONE_USDC = 1_000_000


def requirement(version: int, **changes) -> dict:
    entry = {"scheme": "exact", "network": "eip155:8453" if version == 2 else "base", "asset": USDC, "payTo": PAYEE,
             "maxTimeoutSeconds": 300, "extra": {"name": "USD Coin", "version": "2"}}
    entry["amount" if version == 2 else "maxAmountRequired"] = "10000"
    if version == 1:
        entry.update({"resource": "", "description": "test", "mimeType": "application/json"})
    entry.update(changes)
    return entry


class PaidEndpoint:
    """``GET /paid``: 402 with the given requirement until a payment header arrives, then checks it with eth-account."""

    def __init__(self, version: int, entry: dict) -> None:
        self.version, self.entry, self.payments = version, entry, []
        self.server = LoopbackServer({("GET", "/paid"): self.handle})

    def handle(self, request: Request) -> Reply:
        header = request.headers.get("PAYMENT-SIGNATURE" if self.version == 2 else "X-PAYMENT")
        if not header:
            if self.version == 2:
                required = {"x402Version": 2, "error": "Payment required", "resource": {"url": self.server.url + "/paid"}, "accepts": [self.entry]}
                return Reply(402, {}, {"PAYMENT-REQUIRED": encode_base64_json(required)})
            return Reply(402, {"x402Version": 1, "error": "X-PAYMENT header is required", "accepts": [self.entry]})
        payment = decode_base64_json(header, "payment")
        self.payments.append(payment)
        auth = payment["payload"]["authorization"]
        domain = {"name": "USD Coin", "version": "2", "chainId": 8453, "verifyingContract": USDC}
        message = {**auth, "value": int(auth["value"]), "validAfter": int(auth["validAfter"]), "validBefore": int(auth["validBefore"]),
                   "nonce": bytes.fromhex(auth["nonce"][2:])}
        signable = encode_typed_data(domain, TRANSFER_WITH_AUTHORIZATION_TYPES, message)
        if Account.recover_message(signable, signature=payment["payload"]["signature"]) != auth["from"]:
            return Reply(402, {"error": "bad signature"})
        settled = {"success": True, "transaction": "0x" + "ab" * 32, "network": "eip155:8453", "payer": auth["from"]}
        name = "PAYMENT-RESPONSE" if self.version == 2 else "X-PAYMENT-RESPONSE"
        return Reply(200, {"credits_cents": 500}, {name: encode_base64_json(settled)})


@pytest.fixture
def wallet(home: Home, clock) -> Wallet:
    home.ensure()
    return create_wallet(home.wallet_path, clock)


@pytest.fixture
def signatures(monkeypatch) -> list:
    """Every signature the payer computes is counted here."""
    calls: list = []
    real = payer_module.sign_authorization

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(payer_module, "sign_authorization", counting)
    return calls


ALLOW_ONE_USDC = Allowance(max_amount=ONE_USDC, asset=USDC, network=BASE.caip2, payee=PAYEE)
OPEN_LIMITS = Limits()


def pay(db, wallet, clock, url, allowance=ALLOW_ONE_USDC, limits=OPEN_LIMITS, balance=100 * ONE_USDC):
    payer = Payer(db, wallet, balance_of=(lambda _a: balance) if balance is not None else None, now=clock)
    return payer.fetch(url, allowance=allowance, limits=limits, purpose="x402")


def intent_count(db) -> int:
    return db.scalar("SELECT COUNT(*) FROM payment_intents")


@pytest.mark.parametrize("version", [1, 2])
def test_a_fitting_payment_is_signed_recorded_and_settled(db, wallet, clock, signatures, version: int) -> None:
    endpoint = PaidEndpoint(version, requirement(version))
    with endpoint.server:
        paid = pay(db, wallet, clock, endpoint.server.url + "/paid")
    assert paid.response.status == 200
    assert len(signatures) == 1
    intent = get_intent(db, paid.intent.id)
    assert (intent.status, intent.amount_atomic, intent.amount_cents, intent.payee) == ("settled", 10000, 1, PAYEE)
    assert intent.tx_hash == "0x" + "ab" * 32
    sent = endpoint.payments[0]
    assert sent["x402Version"] == version
    assert sent["payload"]["authorization"]["nonce"] == intent.nonce
    assert set(sent["payload"]["authorization"].values()) <= {v for v in sent["payload"]["authorization"].values() if isinstance(v, str)}
    if version == 2:
        assert sent["accepted"] == endpoint.entry and sent["resource"]["url"].endswith("/paid")
    else:
        assert (sent["scheme"], sent["network"]) == ("exact", "base")


def test_v1_amounts_are_atomic_units_not_whole_usdc(db, wallet, clock, signatures) -> None:
    endpoint = PaidEndpoint(1, requirement(1, maxAmountRequired="500000"))
    with endpoint.server:
        paid = pay(db, wallet, clock, endpoint.server.url + "/paid")
    assert paid.response.status == 200
    assert endpoint.payments[0]["payload"]["authorization"]["value"] == "500000"


REFUSALS = [
    ("amount", {"amount": str(ONE_USDC + 1)}, {}),
    ("asset", {"asset": "0x" + "11" * 20}, {}),
    ("network", {"network": "eip155:84532", "asset": BASE_SEPOLIA.usdc}, {}),
    ("payee", {"payTo": "0x" + "22" * 20}, {}),
    ("scheme", {"scheme": "upto"}, {}),
    ("scheme", {"network": "solana"}, {}),
    ("per_payment_cap", {"amount": "20000"}, {"limits": Limits(per_payment_cents=1)}),
    ("domain", {}, {"limits": Limits(allowed_domains=("conway.tech",))}),
    ("balance", {}, {"balance": 9_999}),
    ("reserve", {}, {"balance": 10_000 + 999_999, "limits": Limits(minimum_reserve_cents=100)}),
    ("reserve", {}, {"balance": None, "limits": Limits(minimum_reserve_cents=100)}),
]


@pytest.mark.parametrize(("field", "changes", "options"), REFUSALS, ids=[f"{r[0]}-{i}" for i, r in enumerate(REFUSALS)])
def test_a_402_asking_for_something_else_is_refused_before_signing(db, wallet, clock, signatures, field, changes, options) -> None:
    endpoint = PaidEndpoint(2, requirement(2, **changes))
    with endpoint.server:
        with pytest.raises(PaymentRefused) as caught:
            pay(db, wallet, clock, endpoint.server.url + "/paid", **options)
    assert caught.value.field == field
    assert str(caught.value).startswith("payment refused: ")
    assert signatures == [] and intent_count(db) == 0 and endpoint.payments == []


def test_exact_amount_allowance_refuses_less_too(db, wallet, clock, signatures) -> None:
    endpoint = PaidEndpoint(2, requirement(2, amount="4000000"))
    allowance = Allowance(max_amount=5 * ONE_USDC, asset=USDC, network=BASE.caip2, exact_amount=True)
    with endpoint.server, pytest.raises(PaymentRefused) as caught:
        pay(db, wallet, clock, endpoint.server.url + "/paid", allowance=allowance)
    assert caught.value.field == "amount" and signatures == [] and intent_count(db) == 0


def test_hourly_and_daily_caps_count_earlier_payments(db, wallet, clock, signatures) -> None:
    limits = x402_limits({**DEFAULT_TREASURY_POLICY, "maxX402PaymentCents": 1, "minimumReserveCents": 0,
                          "x402AllowedDomains": ["127.0.0.1"]})  # 1 cent each, 10 an hour, 50 a day
    endpoint = PaidEndpoint(2, requirement(2))
    with endpoint.server:
        url = endpoint.server.url + "/paid"
        for _ in range(10):
            assert pay(db, wallet, clock, url, limits=limits).response.status == 200
        with pytest.raises(PaymentRefused) as caught:
            pay(db, wallet, clock, url, limits=limits)
        assert caught.value.field == "hourly_cap"
        for _ in range(4):
            clock.advance(3_600_001)
            for _ in range(10):
                pay(db, wallet, clock, url, limits=limits)
        clock.advance(3_600_001)
        with pytest.raises(PaymentRefused) as caught:
            pay(db, wallet, clock, url, limits=limits)
        assert caught.value.field == "daily_cap"
    assert len(signatures) == 50 and intent_count(db) == 50


@pytest.mark.parametrize(("entry", "problem"), [
    ({"amount": "1.5"}, "atomic units"), ({"amount": "-5"}, "atomic units"), ({"payTo": "nobody"}, "payTo"),
])
def test_malformed_requirements_are_errors_not_payments(db, wallet, clock, signatures, entry, problem) -> None:
    endpoint = PaidEndpoint(2, requirement(2, **entry))
    with endpoint.server, pytest.raises(PaymentFormatError, match=problem):
        pay(db, wallet, clock, endpoint.server.url + "/paid")
    assert signatures == [] and intent_count(db) == 0


def always_402() -> LoopbackServer:
    """A server that answers 402 to every request, paid or not, on any path: it collects authorizations."""
    return LoopbackServer({("GET", r"/.*"): lambda r: Reply(402, {"x402Version": 1, "accepts": [requirement(1)]})})


def spent_cents(db) -> int:
    return db.scalar("SELECT COALESCE(SUM(amount_cents), 0) FROM spend_tracking")


def test_a_402_after_payment_counts_as_spent_until_the_chain_says_otherwise(db, wallet, clock, signatures) -> None:
    with always_402() as server:
        paid = pay(db, wallet, clock, server.url + "/paid")
    assert paid.response.status == 402
    intent = get_intent(db, paid.intent.id)
    assert intent.status == "unknown" and "402 after payment" in intent.detail
    assert spent_cents(db) == 1  # the server holds a valid authorization: it is spent until shown otherwise
    # Unused, but its window is still open: it stays spent.
    assert reconcile_open_intents(db, used=lambda i: False, now=clock) == []
    clock.advance(300_000)
    assert reconcile_open_intents(db, used=lambda i: False, now=clock) == [(intent.id, "expired")]
    assert spent_cents(db) == 0 and len(signatures) == 1


def test_a_host_that_took_a_signature_without_delivering_is_not_paid_again_for_the_cooldown(db, wallet, clock, signatures) -> None:
    """The probe: 25 payments of $1 in an hour under a $10 hourly cap, one URL after another, on one host."""
    policy = {**DEFAULT_TREASURY_POLICY, "maxX402PaymentCents": 100, "minimumReserveCents": 0,
              "x402AllowedDomains": ["127.0.0.1"]}
    refused = []
    with always_402() as server:
        for i in range(25):
            try:
                pay(db, wallet, clock, f"{server.url}/item/{i}", limits=x402_limits(policy))
            except PaymentRefused as exc:
                refused.append(exc.field)
            clock.advance(60_000)
        assert len(signatures) == 1 and refused == ["cooldown"] * 24
        assert intent_count(db) == 1
        clock.advance(3_600_000 - 25 * 60_000)  # the hour since the failed payment has passed
        pay(db, wallet, clock, f"{server.url}/item/late", limits=x402_limits(policy))
        assert len(signatures) == 2


def test_the_cooldown_is_configurable(db, wallet, clock, signatures) -> None:
    with always_402() as server:
        payer = Payer(db, wallet, balance_of=lambda _a: 100 * ONE_USDC, now=clock, host_cooldown_ms=60_000)
        payer.fetch(server.url + "/a", allowance=ALLOW_ONE_USDC, limits=OPEN_LIMITS, purpose="x402")
        clock.advance(59_999)
        with pytest.raises(PaymentRefused) as caught:
            payer.fetch(server.url + "/b", allowance=ALLOW_ONE_USDC, limits=OPEN_LIMITS, purpose="x402")
        assert caught.value.field == "cooldown"
        clock.advance(1)
        payer.fetch(server.url + "/c", allowance=ALLOW_ONE_USDC, limits=OPEN_LIMITS, purpose="x402")
    assert len(signatures) == 2


def test_a_5xx_after_payment_also_cools_the_host_down(db, wallet, clock, signatures) -> None:
    server = LoopbackServer({("GET", r"/.*"): lambda r: Reply(503, "later") if "PAYMENT-SIGNATURE" in r.headers
                             else Reply(402, {}, {"PAYMENT-REQUIRED": encode_base64_json({"x402Version": 2, "accepts": [requirement(2)]})})})
    with server:
        assert pay(db, wallet, clock, server.url + "/one").response.status == 503
        with pytest.raises(PaymentRefused) as caught:
            pay(db, wallet, clock, server.url + "/two")
    assert caught.value.field == "cooldown" and len(signatures) == 1 and spent_cents(db) == 1


@pytest.mark.parametrize(("asked", "cap", "expected"), [(100_000_000, None, 300), (60, None, 60), (100_000_000, 30, 30)])
def test_valid_before_is_capped_whatever_the_server_asks(db, wallet, clock, asked, cap, expected) -> None:
    endpoint = PaidEndpoint(2, requirement(2, maxTimeoutSeconds=asked))
    options = {} if cap is None else {"max_validity_s": cap}
    with endpoint.server:
        payer = Payer(db, wallet, balance_of=lambda _a: 100 * ONE_USDC, now=clock, **options)
        paid = payer.fetch(endpoint.server.url + "/paid", allowance=ALLOW_ONE_USDC, limits=OPEN_LIMITS, purpose="x402")
    assert paid.response.status == 200
    sent = endpoint.payments[0]
    assert int(sent["payload"]["authorization"]["validBefore"]) == clock() // 1000 + expected
    assert sent["accepted"]["maxTimeoutSeconds"] == asked  # the requirement is still echoed verbatim
    assert get_intent(db, paid.intent.id).valid_before == clock() // 1000 + expected


def test_the_validity_cap_and_cooldown_come_from_the_treasury_policy() -> None:
    from automaton_min.config import check_value
    from automaton_min.treasury.payer import payer_options

    assert payer_options(DEFAULT_TREASURY_POLICY) == {"max_validity_s": 300, "host_cooldown_ms": 3_600_000}
    assert payer_options({**DEFAULT_TREASURY_POLICY, "x402MaxValiditySeconds": 60}) == {"max_validity_s": 60, "host_cooldown_ms": 3_600_000}
    assert check_value("treasuryPolicy.x402MaxValiditySeconds", 0) is not None
    assert check_value("treasuryPolicy.x402MaxValiditySeconds", 10**9) is not None
    assert check_value("treasuryPolicy.x402HostCooldownMs", -1) is not None


def test_only_the_paid_request_carries_the_body(db, wallet, clock) -> None:
    def handle(request: Request) -> Reply:
        if "PAYMENT-SIGNATURE" in request.headers:
            return Reply(200, {"ok": True})
        return Reply(402, {}, {"PAYMENT-REQUIRED": encode_base64_json({"x402Version": 2, "accepts": [requirement(2)]})})

    with LoopbackServer({("POST", "/paid"): handle}) as server:
        payer = Payer(db, wallet, balance_of=lambda _a: 100 * ONE_USDC, now=clock)
        paid = payer.fetch(server.url + "/paid", allowance=ALLOW_ONE_USDC, limits=OPEN_LIMITS, purpose="x402",
                           method="POST", body={"secret": "data"})
        assert paid.response.status == 200
        unpaid, paid_request = server.requests
    assert unpaid.body == b"" and "PAYMENT-SIGNATURE" not in unpaid.headers
    assert orjson.loads(paid_request.body) == {"secret": "data"} and "PAYMENT-SIGNATURE" in paid_request.headers


def test_a_free_resource_still_gets_its_body(db, wallet, clock, signatures) -> None:
    with LoopbackServer({("POST", "/free"): lambda r: Reply(200 if r.body else 400, {"got": r.json()})}) as server:
        payer = Payer(db, wallet, now=clock)
        answer = payer.fetch(server.url + "/free", allowance=ALLOW_ONE_USDC, limits=OPEN_LIMITS, purpose="x402",
                             method="POST", body={"n": 1})
        assert [r.body for r in server.requests] == [b"", b'{"n":1}']
    assert answer.response.status == 200 and answer.intent is None and signatures == []


CRASHING_PAYER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from automaton_min.chain.wallet import load_wallet
    from automaton_min.net.http import request
    from automaton_min.store.db import open_database
    from automaton_min.treasury.guard import Allowance
    from automaton_min.treasury.money_out import Limits
    from automaton_min.treasury.payer import Payer
    home, url, now_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
    calls = []
    def send(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:   # the paid request: the process dies before it leaves
            os._exit(137)
        return request(*args, **kwargs)
    db = open_database(Path(home) / "state.db")
    payer = Payer(db, load_wallet(Path(home) / "wallet.json"), now=lambda: now_ms, send=send)
    payer.fetch(url, allowance=Allowance(1_000_000, "{usdc}", "eip155:8453", "{payee}"), limits=Limits(), purpose="x402")
""").replace("{usdc}", USDC).replace("{payee}", PAYEE)


def test_after_a_crash_between_intent_and_send_no_second_payment_is_signed(home: Home, wallet, clock, signatures) -> None:
    endpoint = PaidEndpoint(2, requirement(2))
    with endpoint.server:
        url = endpoint.server.url + "/paid"
        crashed = subprocess.run([sys.executable, "-c", CRASHING_PAYER, str(home.root), url, str(clock())],
                                 capture_output=True, text=True, env=dict(os.environ), timeout=60)
        assert crashed.returncode == 137, crashed.stderr
        with open_database(home.default_db_path, now=clock) as db:
            (intent_id, status), = db.query("SELECT id, status FROM payment_intents")
            assert status == "pending"
            clock.advance(60_000)
            with pytest.raises(PaymentRefused) as caught:
                pay(db, wallet, clock, url)
            assert caught.value.field == "unresolved" and intent_id in str(caught.value)
            assert signatures == [] and intent_count(db) == 1 and endpoint.payments == []

            # While its window is open and the chain has not used its nonce, it stays open.
            assert reconcile_open_intents(db, used=lambda intent: False, now=clock) == []
            # Once the window has closed unused, the old authorization can never settle: pay again, anew.
            clock.advance(300_000)
            assert reconcile_open_intents(db, used=lambda intent: False, now=clock) == [(intent_id, "expired")]
            paid = pay(db, wallet, clock, url)
            assert paid.response.status == 200 and len(signatures) == 1
            assert paid.intent.nonce != get_intent(db, intent_id).nonce


def test_reconcile_marks_used_nonces_settled(db, wallet, clock) -> None:
    server = LoopbackServer({("GET", "/paid"): lambda r: Reply(500, "boom") if "PAYMENT-SIGNATURE" in r.headers
                             else Reply(402, {}, {"PAYMENT-REQUIRED": encode_base64_json({"x402Version": 2, "accepts": [requirement(2)]})})})
    with server:
        paid = pay(db, wallet, clock, server.url + "/paid")
    assert get_intent(db, paid.intent.id).status == "unknown"
    assert reconcile_open_intents(db, used=lambda intent: intent.id == paid.intent.id, now=clock) == [(paid.intent.id, "settled")]


def test_intents_are_committed_before_the_signature_exists(db, wallet, clock, monkeypatch) -> None:
    seen = []
    real = payer_module.sign_authorization

    def checking(*args, **kwargs):
        with open_database(Path(db.path), now=clock) as other:  # another connection sees the committed row
            seen.append(other.query("SELECT status FROM payment_intents"))
        return real(*args, **kwargs)

    monkeypatch.setattr(payer_module, "sign_authorization", checking)
    endpoint = PaidEndpoint(2, requirement(2))
    with endpoint.server:
        pay(db, wallet, clock, endpoint.server.url + "/paid")
    assert seen == [[("pending",)]]


def test_the_key_never_reaches_the_ledger_or_the_wire(db, wallet, clock) -> None:
    endpoint = PaidEndpoint(2, requirement(2))
    with endpoint.server:
        pay(db, wallet, clock, endpoint.server.url + "/paid")
    key = wallet.key_bytes().hex()
    rows = orjson.dumps(db.query("SELECT * FROM payment_intents")).decode().lower()
    wire = b"".join(r.body + orjson.dumps(r.headers) for r in endpoint.server.requests).decode().lower()
    assert key not in rows and key not in wire


def test_retention_prunes_old_resolved_intents_and_keeps_open_ones(db, wallet, clock) -> None:
    def intent(status: str) -> str:
        authorization = TransferAuthorization(wallet.address, PAYEE, 10_000, 0, clock() // 1000 + 300, new_nonce())
        made = record_intent(db, purpose="x402", resource="https://conway.tech/x", network=BASE.caip2, asset=USDC,
                             authorization=authorization, amount_cents=1, now_ms=clock())
        if status != "pending":
            set_outcome(db, made.id, status, clock())
        return made.id

    old = {status: intent(status) for status in ("settled", "rejected", "expired", "unknown", "pending")}
    clock.advance(400 * 86_400_000)
    recent = intent("settled")
    assert prune_resolved(db, clock() - 365 * 86_400_000) == 3
    remaining = {row[0] for row in db.query("SELECT id FROM payment_intents")}
    assert remaining == {old["unknown"], old["pending"], recent}

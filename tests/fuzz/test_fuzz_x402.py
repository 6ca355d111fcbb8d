"""Fuzz 402 answers: the x402 parser and the payment guard, with the wallet's signing observed.

Whatever a server asks (wrong amount, payee, asset or network; huge, negative or fractional amounts; broken
base64), the outcome is a parsed requirement, ``PaymentFormatError`` or ``PaymentRefused``, and nothing
outside the allowance is ever signed. Whatever URL the agent is given (the parser tricks of ``test_fuzz_urls``),
a payment goes only to a server the allow-list read as allowed."""

from __future__ import annotations

import base64
import itertools

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import automaton_min.chain.eip712 as eip712_module
import automaton_min.chain.signing as signing_module
from automaton_min.chain.usdc import BASE, BASE_SEPOLIA
from automaton_min.chain.wallet import Wallet, create_wallet
from automaton_min.chain.x402 import PaymentFormatError, PaymentRequired, decode_base64_json, parse_payment_required
from automaton_min.home import Home
from automaton_min.net.http import Response
from automaton_min.net.url import UnreadableUrl
from automaton_min.treasury.guard import Allowance, PaymentRefused, check_payment
from automaton_min.treasury.money_out import Limits
from automaton_min.treasury.payer import Payer
from test_fuzz_urls import client_host, urls

PAYEE = "0x9A1A83ab15177d7eD6Ab206DeED29f3781414370"
OTHER = "0x" + "22" * 20
USDC = BASE.usdc
MAX = 1_000_000  # one USDC
ALLOWANCE = Allowance(max_amount=MAX, asset=USDC, network=BASE.caip2, payee=PAYEE)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                            HealthCheck.too_slow])

scalars = st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1) | st.floats() | st.text(max_size=20)
junk = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=6)
amounts = (st.integers(min_value=-10, max_value=2 * MAX).map(str) | st.sampled_from(
    ["0", "1", str(MAX), str(MAX + 1), "9" * 78, "9" * 79, "1" + "0" * 5000, "-1", "1.5", "0.000001", "1e6", " 10",
     "10 ", "0x10", "１０", "", "+5", "NaN"]) | st.integers(min_value=-(2**63), max_value=2**64 - 1) | junk)
addresses = st.sampled_from([PAYEE, PAYEE.lower(), OTHER, USDC, BASE_SEPOLIA.usdc, "0x" + "00" * 20, "nobody", "", "0x12"]) | junk
networks = st.sampled_from(["eip155:8453", "base", "eip155:84532", "base-sepolia", "solana", "eip155:1", ""]) | junk
entries = st.fixed_dictionaries({}, optional={
    "scheme": st.sampled_from(["exact", "upto", ""]) | junk, "network": networks, "asset": addresses, "payTo": addresses,
    "amount": amounts, "maxAmountRequired": amounts, "maxTimeoutSeconds": junk,
    "extra": st.fixed_dictionaries({}, optional={"name": junk, "version": junk}) | junk, "resource": junk})
documents = st.fixed_dictionaries({"accepts": st.lists(entries | junk, max_size=3) | junk}, optional={
    "x402Version": st.sampled_from([1, 2]) | junk, "resource": junk, "error": junk}) | junk


def _b64(document) -> str:
    try:
        return base64.b64encode(orjson.dumps(document)).decode()
    except orjson.JSONEncodeError:
        return "!!not-json"


headers = st.one_of(
    st.just({}),
    documents.map(lambda d: {"PAYMENT-REQUIRED": _b64(d)}),
    st.text(max_size=200).map(lambda t: {"PAYMENT-REQUIRED": t}),
    st.binary(max_size=100).map(lambda b: {"payment-required": base64.b64encode(b).decode()}),
    st.sampled_from([{"PAYMENT-REQUIRED": "===="}, {"PAYMENT-REQUIRED": "e30"}, {"PAYMENT-REQUIRED": " " * 5},
                     {"PAYMENT-REQUIRED": base64.b64encode(b"[" * 100_000).decode()},
                     {"PAYMENT-REQUIRED": base64.b64encode(b"\xff\xfe{}").decode()}]))
bodies = documents.map(lambda d: orjson.dumps(d) if _b64(d) != "!!not-json" else b"{}") | st.binary(max_size=100)


@SETTINGS
@given(headers, bodies)
def test_the_parser_gives_requirements_or_a_format_error(headers: dict, body: bytes) -> None:
    try:
        required = parse_payment_required(headers, body, "https://api.example/x")
    except PaymentFormatError as exc:
        assert str(exc) and "\n" not in str(exc)[:2000]
        return
    assert isinstance(required, PaymentRequired)
    for requirement in required.requirements:
        assert isinstance(requirement.amount, int) and requirement.amount >= 0


@SETTINGS
@given(documents, st.integers(min_value=0, max_value=10**30) | st.none(),
       st.sampled_from([Limits(), Limits(per_payment_cents=1, hourly_cents=10, daily_cents=50, minimum_reserve_cents=100,
                                         allowed_domains=("example",))]))
def test_the_guard_passes_only_what_the_allowance_allows(document, balance, limits) -> None:
    try:
        required = parse_payment_required({"PAYMENT-REQUIRED": _b64(document)}, b"", "https://api.example/x")
    except PaymentFormatError:
        return
    for requirement in required.requirements:
        try:
            check_payment(requirement, ALLOWANCE, limits, url="https://api.example/x", spent_last_hour_cents=0,
                          spent_last_day_cents=0, balance=balance)
        except PaymentRefused as exc:
            assert str(exc).startswith("payment refused: ") and exc.field
            continue
        assert requirement.supported and requirement.network is BASE
        assert requirement.asset.lower() == USDC.lower() and requirement.pay_to.lower() == PAYEE.lower()
        assert 0 <= requirement.amount <= MAX


# ------------------------------------------------------------------ the payer, signing observed


@pytest.fixture
def wallet(home: Home, clock) -> Wallet:
    home.ensure()
    return create_wallet(home.wallet_path, clock)


@pytest.fixture
def signed(monkeypatch) -> list:
    """Every digest the wallet signs (eip712 binds ``sign_digest`` by name, so both places are patched)."""
    calls: list = []
    real = signing_module.sign_digest

    def observed(wallet, digest):
        calls.append(digest)
        return real(wallet, digest)

    monkeypatch.setattr(signing_module, "sign_digest", observed)
    monkeypatch.setattr(eip712_module, "sign_digest", observed)
    return calls


class FakeServer:
    """Answers the first request with the drawn 402, a paid one with 200 and a settlement; keeps what was paid."""

    def __init__(self) -> None:
        self.answer: tuple[dict, bytes] = ({}, b"")
        self.paid: list[dict] = []
        self.urls: list[str] = []
        self.finishing: list[bool] = []  # per request: whether it asked to finish at a stop

    def send(self, method, url, headers=None, **kwargs):
        self.urls.append(url)
        self.finishing.append(bool(kwargs.get("finish_at_stop")))
        header = (headers or {}).get("PAYMENT-SIGNATURE") or (headers or {}).get("X-PAYMENT")
        if header:
            self.paid.append(decode_base64_json(header, "payment"))
            settled = {"success": True, "transaction": "0x" + "ab" * 32, "network": "eip155:8453"}
            return Response(200, {"PAYMENT-RESPONSE": _b64(settled)}, b"{}", url)
        return Response(402, self.answer[0], self.answer[1], url)


PATHS = itertools.count()
# Mostly near-valid requirements, so the guard (not only the parser) is what stands in the way.
near_valid = st.fixed_dictionaries({
    "scheme": st.sampled_from(["exact", "exact", "upto"]), "network": st.sampled_from(["eip155:8453", "eip155:8453", "eip155:84532"]),
    "asset": st.sampled_from([USDC, USDC, BASE_SEPOLIA.usdc, OTHER]), "payTo": st.sampled_from([PAYEE, PAYEE, OTHER]),
    "amount": amounts, "maxTimeoutSeconds": st.sampled_from([300, 0, -1, 10**12])})


@SETTINGS
@given(st.one_of(near_valid.map(lambda e: ({"PAYMENT-REQUIRED": _b64({"x402Version": 2, "accepts": [e]})}, b"")),
                 st.tuples(headers, bodies)))
def test_the_payer_never_signs_outside_the_allowance(db, wallet, clock, signed, answer) -> None:
    server = FakeServer()
    server.answer = answer
    payer = Payer(db, wallet, balance_of=lambda _address: 10**40, now=clock, send=server.send)
    before = len(signed)
    try:
        paid = payer.fetch(f"https://api.example/p{next(PATHS)}", allowance=ALLOWANCE, limits=Limits(), purpose="x402")
    except (PaymentRefused, PaymentFormatError) as exc:
        assert len(signed) == before and str(exc)
        return
    assert paid.response.status == 200
    assert len(signed) == before + 1 and len(server.paid) == 1
    authorization = server.paid[0]["payload"]["authorization"]
    assert 0 <= int(authorization["value"]) <= MAX
    assert authorization["to"].lower() == PAYEE.lower()
    accepted = server.paid[0]["accepted"]
    assert accepted["asset"].lower() == USDC.lower() and accepted["network"] == "eip155:8453"


FITTING = {"scheme": "exact", "network": "eip155:8453", "asset": USDC, "payTo": PAYEE, "amount": "1"}


@SETTINGS
@given(urls, st.sampled_from(["https://conway.tech/x", "http://127.0.0.1:9\\@conway.tech/", "https://evil.example/"]))
def test_a_payment_goes_only_to_a_host_the_allow_list_read_as_allowed(db, wallet, clock, signed, raw, resource) -> None:
    server = FakeServer()
    server.answer = ({"PAYMENT-REQUIRED": _b64({"x402Version": 2, "accepts": [FITTING], "resource": resource})}, b"")
    payer = Payer(db, wallet, balance_of=lambda _address: 10**40, now=clock, send=server.send)
    before = len(signed)
    try:
        payer.fetch(raw, allowance=ALLOWANCE, limits=Limits(allowed_domains=("conway.tech",)), purpose="x402")
    except (UnreadableUrl, PaymentRefused) as exc:
        assert str(exc) and "\n" not in str(exc)
        if isinstance(exc, UnreadableUrl):
            assert server.urls == []  # refused before any request
        assert len(signed) == before
        return
    assert len(signed) == before + 1
    assert all(client_host(u) == "conway.tech" or client_host(u).endswith(".conway.tech") for u in server.urls), server.urls


def test_the_observation_sees_a_payment_inside_the_allowance(db, wallet, clock, signed) -> None:
    """The fuzz above is not vacuous: a fitting requirement is signed once, through the patched function."""
    entry = {"scheme": "exact", "network": "eip155:8453", "asset": USDC, "payTo": PAYEE, "amount": str(MAX)}
    server = FakeServer()
    server.answer = ({"PAYMENT-REQUIRED": _b64({"x402Version": 2, "accepts": [entry]})}, b"")
    payer = Payer(db, wallet, balance_of=lambda _address: 10**40, now=clock, send=server.send)
    assert payer.fetch("https://api.example/ok", allowance=ALLOWANCE, limits=Limits(), purpose="x402").response.status == 200
    assert len(signed) == 1 and int(server.paid[0]["payload"]["authorization"]["value"]) == MAX
    assert server.finishing == [False, True]  # a stop cuts the probe, and waits for the paid answer
    entry["amount"] = str(MAX + 1)
    server.answer = ({"PAYMENT-REQUIRED": _b64({"x402Version": 2, "accepts": [entry]})}, b"")
    with pytest.raises(PaymentRefused):
        payer.fetch("https://api.example/more", allowance=ALLOWANCE, limits=Limits(), purpose="x402")
    assert len(signed) == 1

"""Money at start and in the dead state, against a real EVM, JSON-RPC node and the x402 SDK's server.

Every time the chain or the SDK server judges (validAfter/validBefore) is taken from the chain
(``chain.now()``), never from the fixed test clock, so these pass on any date.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
import requests

import automaton_min.runtime.agent_runtime as runtime_module
from automaton_min.agent.states import read_agent_state
from automaton_min.agent.survival import FinancialCache
from automaton_min.chain.eip3009 import TokenDomain, TransferAuthorization, new_nonce, sign_authorization
from automaton_min.chain.usdc import BASE
from automaton_min.chain.wallet import load_wallet
from automaton_min.clock import to_iso
from automaton_min.config import load_config
from automaton_min.agent.hooks import AgentHooks
from automaton_min.runtime.startup import money_at_start
from automaton_min.store.kv import get_value, set_value
from automaton_min.treasury.ledger import get_intent, record_intent
from conftest import FixedClock
from standins.loopback_http import LoopbackServer, Reply, Request
from standins.model_servers import OpenAIServer, openai_answer

ONE_USDC = 1_000_000
USDC_ON_BASE = TokenDomain("USD Coin", "2", 8453, BASE.usdc)
RELAYED = ("payment-required", "payment-response", "x-payment-response", "content-type")


class ConwayWithPay:
    """Conway's credits API and its ``/pay/<usd>/<address>`` top-up on one host; payment by the x402 SDK server."""

    def __init__(self, x402_url: str, cents: int) -> None:
        self.x402_url, self.cents, self.api_key = x402_url, cents, "cnwy_k_startup_test_0001"
        self.server = LoopbackServer({("GET", r"/v1/credits/balance"): self._balance,
                                      ("GET", r"/pay/(?P<usd>[0-9]+)/(?P<address>0x[0-9a-fA-F]{40})"): self._pay})

    def _balance(self, request: Request) -> Reply:
        if request.headers.get("Authorization") != self.api_key:
            return Reply(401, {"error": "invalid API key"})
        return Reply(200, {"balance_cents": self.cents})

    def _pay(self, request: Request) -> Reply:
        forwarded = {k: v for k, v in request.headers.items() if k.lower().startswith(("payment-", "x-payment"))}
        answer = requests.get(self.x402_url + request.path, headers=forwarded, timeout=30)
        if answer.status_code == 200:
            self.cents += int(request.match["usd"]) * 100
        headers = {k: v for k, v in answer.headers.items() if k.lower() in RELAYED}
        return Reply(answer.status_code, answer.content, headers)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def pay_requests(self) -> list[Request]:
        return [r for r in self.server.requests if r.path.startswith("/pay/")]

    def __enter__(self) -> "ConwayWithPay":
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(*exc)


@pytest.fixture
def model():
    with OpenAIServer(mode="llamacpp") as server:
        yield server


@pytest.fixture
def agent_clock(chain) -> FixedClock:
    """The agent's clock, started at the chain's block time (what the chain and the SDK server judge by)."""
    return FixedClock(chain.now() * 1000)


def address_of(home) -> str:
    return load_wallet(home.wallet_path).address


def test_start_reconciles_open_intents_from_the_chain(chain, rpc, home, agent_for, agent_clock, merchant) -> None:
    agent = agent_for(rpcUrl=rpc.url)
    wallet = load_wallet(home.wallet_path)
    chain.mint(wallet.address, 3 * ONE_USDC)
    made = []
    for _ in range(2):
        auth = TransferAuthorization(wallet.address, merchant.address, ONE_USDC, 0, chain.now() + 300, new_nonce())
        made.append((auth, record_intent(agent.db, purpose="x402", resource=f"http://127.0.0.1/{len(made)}", network=BASE.caip2,
                                         asset=BASE.usdc, authorization=auth, amount_cents=100, now_ms=agent_clock())))
    (used_auth, used), (_, unused) = made
    assert chain.submit_transfer_with_authorization(used_auth.wire(), sign_authorization(wallet, used_auth, USDC_ON_BASE)).ok
    agent.db.close()

    again = agent_for(rpcUrl=rpc.url)  # a restart
    assert get_intent(again.db, used.id).status == "settled"
    assert get_intent(again.db, unused.id).status == "pending"  # unused, but its window is still open


@pytest.fixture
def conway(x402_v2):
    with ConwayWithPay(x402_v2.url, cents=20) as api:
        yield api


def test_start_buys_5_of_credits_once(chain, rpc, home, agent_for, conway, merchant) -> None:
    agent_for(rpcUrl=rpc.url)  # setup creates the wallet; nothing to buy with yet
    assert conway.pay_requests == []
    chain.mint(address_of(home), 10 * ONE_USDC)
    merchant_before = chain.balance_of(merchant.address)

    agent = agent_for(rpcUrl=rpc.url, conwayApiUrl=conway.url, conwayApiKey=conway.api_key)
    assert conway.cents == 520 and chain.balance_of(merchant.address) == merchant_before + 5 * ONE_USDC
    assert agent.db.query("SELECT purpose, status FROM payment_intents") == [("topup", "settled")]
    agent.db.close()

    conway.cents = 20  # the credits have not shown yet when the agent restarts
    again = agent_for(rpcUrl=rpc.url, conwayApiUrl=conway.url, conwayApiKey=conway.api_key)
    assert chain.balance_of(merchant.address) == merchant_before + 5 * ONE_USDC
    assert again.db.scalar("SELECT COUNT(*) FROM payment_intents") == 1 and len(conway.pay_requests) == 2


def test_start_is_bounded_in_time(chain, rpc, home, agent_for, conway, agent_clock) -> None:
    agent = agent_for(rpcUrl=rpc.url)
    chain.mint(address_of(home), 10 * ONE_USDC)
    config = load_config(home, {})
    config.values.update(conwayApiUrl=conway.url, conwayApiKey=conway.api_key)
    rpc.fail("delay", times=1, delay=3.0)  # the USDC read hangs past the budget
    try:
        started = time.monotonic()
        result = money_at_start(agent.db, load_wallet(home.wallet_path), config, now=agent_clock, budget_s=1.0)
        elapsed = time.monotonic() - started
    finally:
        rpc.clear_faults()
    assert elapsed < 2.5 and result.topup is None
    assert conway.pay_requests == [] and agent.db.scalar("SELECT COUNT(*) FROM payment_intents") == 0


def test_the_runtime_reads_usdc_from_the_default_base_node_when_rpc_url_is_unset(chain, rpc, home, agent_for, conway,
                                                                                   monkeypatch, agent_clock) -> None:
    monkeypatch.setattr(runtime_module, "BASE", dataclasses.replace(BASE, default_rpc_url=rpc.url))
    conway.cents = 100_000
    agent = agent_for(rpcUrl=None, conwayApiUrl=conway.url, conwayApiKey=conway.api_key)
    chain.mint(address_of(home), 7 * ONE_USDC)
    assert agent.hooks.finances(agent_clock()).usdc_atomic == chain.balance_of(address_of(home))


def test_a_dead_agent_tops_up_before_skipping_its_cycle_and_wakes(chain, rpc, home, agent_for, conway, model,
                                                                   agent_clock, merchant) -> None:
    conway.cents = -5
    agent = agent_for(rpcUrl=rpc.url, conwayApiUrl=conway.url, conwayApiKey=conway.api_key)
    agent.loop.run_cycle("test")
    assert read_agent_state(agent.db) == "dead" and model.requests == []

    chain.mint(address_of(home), 10 * ONE_USDC)  # USDC arrives, credits do not
    agent_clock.advance(61_000)
    merchant_before = chain.balance_of(merchant.address)
    model.script(openai_answer("alive again"))
    result = agent.loop.run_cycle("timer")
    assert result.reason != "dead: waiting for funding" and len(model.requests) == 1
    assert chain.balance_of(merchant.address) == merchant_before + 5 * ONE_USDC and conway.cents == 495
    assert read_agent_state(agent.db) != "dead"
    assert get_value(agent.db, "last_inline_topup_attempt") == to_iso(agent_clock())


# --------------------------------------------------------------------------- the inline top-up's cool-down in KV


@pytest.mark.parametrize("stored", ["iso", "epoch"])
def test_last_inline_topup_attempt_may_be_iso_or_epoch_ms(db, home, clock, stored) -> None:
    attempts = []
    hooks = AgentHooks(db, None, home, now=clock, finances=FinancialCache(lambda: 20, lambda: 10 * ONE_USDC, now=clock),
                         topup=attempts.append)
    earlier = clock() - 30_000
    set_value(db, "last_inline_topup_attempt", to_iso(earlier) if stored == "iso" else str(earlier), clock())
    hooks.survive(hooks.finances(clock()), clock())
    assert attempts == []  # 30 s ago: still cooling down
    clock.advance(30_000)
    hooks.survive(hooks.finances(clock()), clock())
    assert len(attempts) == 1 and get_value(db, "last_inline_topup_attempt") == to_iso(clock())


def test_an_unreadable_last_attempt_does_not_crash_the_loop(db, home, clock) -> None:
    attempts = []
    hooks = AgentHooks(db, None, home, now=clock, finances=FinancialCache(lambda: 20, lambda: 10 * ONE_USDC, now=clock),
                         topup=attempts.append)
    set_value(db, "last_inline_topup_attempt", "yesterday-ish", clock())
    assert hooks.survive(hooks.finances(clock()), clock())[0] == "low_compute" and len(attempts) == 1


def test_start_is_bounded_in_time_when_the_conway_api_keeps_failing(home, agent_for, agent_clock) -> None:
    """503s with a long Retry-After: the credits read's retries end with the start-up budget."""
    failing = LoopbackServer({("GET", r"/v1/credits/balance"): lambda request: Reply(503, {"error": "down"},
                                                                                    headers={"Retry-After": "30"})})
    with failing:
        agent = agent_for()
        config = load_config(home, {})
        config.values.update(conwayApiUrl=failing.url, conwayApiKey="cnwy_k_test_0001")
        started = time.monotonic()
        result = money_at_start(agent.db, load_wallet(home.wallet_path), config, now=agent_clock, budget_s=1.0)
        elapsed = time.monotonic() - started
    assert elapsed < 5 and result.topup is None and len(failing.requests) >= 1

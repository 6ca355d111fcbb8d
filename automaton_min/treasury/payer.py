"""Paying for a resource with x402: probe, check, record, sign, send once, record the outcome.

Order matters for money: the guard runs before anything is signed; the intent is
committed with a full sync before the signature exists; the paid request is sent
exactly once (never retried); an answer that is not clearly a success or a
refusal leaves the intent ``unknown`` and counted as spent until it is resolved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping
from urllib.parse import urlsplit

from automaton_min.chain.eip3009 import TransferAuthorization, new_nonce, sign_authorization
from automaton_min.chain.usdc import network_named
from automaton_min.chain.wallet import Wallet
from automaton_min.chain.x402 import (
    PaymentFormatError,
    choose_requirement,
    parse_payment_required,
    payment_header,
    settlement,
)
from automaton_min.clock import Clock, system_now
from automaton_min.net.http import NetworkError, Response, request
from automaton_min.observe.log import get_logger
from automaton_min.treasury.guard import Allowance, Limits, PaymentRefused, cents_of, check_payment
from automaton_min.treasury.ledger import Intent, blocking_intents, open_intents, record_intent, set_outcome
from automaton_min.treasury.spend import DAY_MS, HOUR_MS, SpendTracker

if TYPE_CHECKING:
    from automaton_min.store.db import Database

# What each purpose is recorded as in spend_tracking: (category, tool name).
SPEND_KIND = {"x402": ("x402", "x402_fetch"), "topup": ("other", "topup_credits")}
CLOCK_SKEW_S = 600  # validAfter well in the past: chains simulate at the latest block, which may lag

log = get_logger(__name__)

Sender = Callable[..., Response]
BalanceReader = Callable[[str], int]


@dataclass
class PaidResponse:
    """The final answer, and the intent behind it when a payment was made."""

    response: Response
    intent: Intent | None = None
    settlement: dict[str, Any] | None = None


class Payer:
    """Makes x402 payments for one wallet, under one ledger."""

    def __init__(
        self,
        db: "Database",
        wallet: Wallet,
        *,
        balance_of: BalanceReader | None = None,
        now: Clock = system_now,
        send: Sender = request,
        timeout: float = 30.0,
    ) -> None:
        self.db = db
        self.wallet = wallet
        self.balance_of = balance_of
        self.now = now
        self.send = send
        self.timeout = timeout
        self.spend = SpendTracker(db, now)

    def fetch(
        self,
        url: str,
        *,
        allowance: Allowance,
        limits: Limits,
        purpose: str,
        method: str = "GET",
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        balance: int | None = None,
    ) -> PaidResponse:
        """Request ``url``; if it answers 402, pay within ``allowance`` and ``limits`` and request it again.

        ``balance`` is the wallet's USDC when the caller has just read it (saves a second read).
        """
        probe = self.send(method, url, json=body, headers=headers, timeout=self.timeout)
        if probe.status != 402:
            return PaidResponse(probe)

        required = parse_payment_required(probe.headers, probe.body, url)
        requirement = choose_requirement(required)
        if requirement is None:
            offered = ", ".join(f"{r.scheme} on {r.network_name}" for r in required.requirements) or "nothing"
            raise PaymentRefused("scheme", f"{url} offers {offered}; only exact USDC payments on Base are supported")
        now_ms = self.now()
        category, tool_name = SPEND_KIND[purpose]
        check_payment(
            requirement, allowance, limits, url=url,
            spent_last_hour_cents=self.spend.spent(category, HOUR_MS),
            spent_last_day_cents=self.spend.spent(category, DAY_MS),
            balance=balance if balance is not None else (self.balance_of(self.wallet.address) if self.balance_of else None),
        )
        now_s = now_ms // 1000
        earlier = blocking_intents(self.db, purpose, url, now_s)
        if earlier:
            raise PaymentRefused(
                "unresolved",
                f"an earlier payment for {url} (intent {earlier[0].id}) may still settle until "
                f"{earlier[0].valid_before}; not paying twice",
            )

        authorization = TransferAuthorization(
            sender=self.wallet.address,
            recipient=requirement.pay_to,
            value=requirement.amount,
            valid_after=max(0, now_s - CLOCK_SKEW_S),
            valid_before=now_s + requirement.max_timeout_seconds,
            nonce=new_nonce(),
        )
        with self.db.transaction(durable=True):  # on disk before the signature exists
            intent = record_intent(
                self.db, purpose=purpose, resource=url, network=requirement.network.caip2, asset=requirement.asset,
                authorization=authorization, amount_cents=cents_of(requirement.amount), now_ms=now_ms,
            )
            self.spend.record(category, intent.amount_cents, tool_name, recipient=requirement.pay_to,
                              domain=urlsplit(url).hostname, spend_id=intent.id)
        signature = sign_authorization(self.wallet, authorization, requirement.token_domain())
        name, value = payment_header(required, requirement, authorization, signature)
        log.info("paying", extra={"intent": intent.id, "resource": url, "amount_atomic": requirement.amount,
                                  "payee": requirement.pay_to, "network": requirement.network.caip2})
        try:
            paid = self.send(method, url, json=body, headers={**(headers or {}), name: value}, timeout=self.timeout)
        except NetworkError as exc:
            resolve(self.db, intent.id, "unknown", self.now(), str(exc))
            raise
        return self._record_answer(intent, paid)

    def _record_answer(self, intent: Intent, paid: Response) -> PaidResponse:
        try:
            settled = settlement(paid.headers)
        except PaymentFormatError:
            settled = None
        tx_hash = settled.get("transaction") if settled and isinstance(settled.get("transaction"), str) else None
        if paid.ok:
            resolve(self.db, intent.id, "settled", self.now(), f"HTTP {paid.status}", tx_hash)
        elif paid.status == 402:
            reason = (settled or {}).get("errorReason") or paid.body[:200].decode("utf-8", "replace")
            resolve(self.db, intent.id, "rejected", self.now(), f"HTTP 402: {reason}")
        else:
            resolve(self.db, intent.id, "unknown", self.now(), f"HTTP {paid.status}")
        log.info("payment answered", extra={"intent": intent.id, "status": paid.status, "tx": tx_hash})
        return PaidResponse(paid, intent, settled)


def resolve(db: "Database", intent_id: str, status: str, now_ms: int, detail: str = "", tx_hash: str | None = None) -> None:
    """Record an intent's outcome, synced; a payment that never happened leaves the spend record too."""
    with db.transaction(durable=True):
        set_outcome(db, intent_id, status, now_ms, detail, tx_hash)
        if status in ("rejected", "expired"):
            SpendTracker(db).forget(intent_id)


def reconcile_open_intents(db: "Database", used: Callable[[Intent], bool], now: Clock = system_now) -> list[tuple[str, str]]:
    """Resolve open intents from the chain: used nonces settled, unused ones past their window expired.

    ``used(intent)`` asks the token contract (``authorizationState``). An unused
    authorization that is still inside its window stays open: it could still settle.
    Returns ``(intent id, new status)`` for every change.
    """
    changes = []
    for intent in open_intents(db):
        if network_named(intent.network) is None:
            continue
        now_ms = now()
        if used(intent):
            resolve(db, intent.id, "settled", now_ms, "nonce used on chain")
            changes.append((intent.id, "settled"))
        elif intent.valid_before <= now_ms // 1000:
            resolve(db, intent.id, "expired", now_ms, "window closed, nonce never used")
            changes.append((intent.id, "expired"))
    return changes

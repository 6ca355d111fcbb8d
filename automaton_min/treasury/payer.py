"""Paying for a resource with x402: probe, check, record, sign, send once, record the outcome, in this order (the
order matters for money; README: Payments)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping
from urllib.parse import urljoin

from automaton_min.chain.eip3009 import TransferAuthorization, new_nonce, sign_authorization
from automaton_min.chain.usdc import format_usdc, network_named
from automaton_min.chain.wallet import Wallet
from automaton_min.chain.x402 import (
    PaymentFormatError,
    PaymentRequirement,
    choose_requirement,
    parse_payment_required,
    payment_header,
    settlement,
)
from automaton_min.clock import Clock, DAY_MS, HOUR_MS, from_iso, system_now, to_iso
from automaton_min.config import DEFAULT_TREASURY_POLICY
from automaton_min.errors import AutomatonError
from automaton_min.net.http import NetworkError, Response, header_value, request
from automaton_min.net.url import UnreadableUrl, read_url
from automaton_min.log import get_logger
from automaton_min.crashpoint import crash_point
from automaton_min.treasury.guard import Allowance, PaymentRefused, cents_of, check_payment
from automaton_min.treasury.ledger import Intent, blocking_intents, open_intents, record_intent, set_outcome
from automaton_min.treasury.money_out import Limits
from automaton_min.store.kv import get_value, set_value
from automaton_min.treasury.spend import SpendTracker

if TYPE_CHECKING:
    from automaton_min.store.db import Database

# What each purpose is recorded as in spend_tracking: (category, tool name).
SPEND_KIND = {"x402": ("x402", "x402_fetch"), "topup": ("other", "topup_credits")}
CLOCK_SKEW_S = 600  # validAfter well in the past: chains simulate at the latest block, which may lag
DEFAULT_MAX_VALIDITY_S = DEFAULT_TREASURY_POLICY["x402MaxValiditySeconds"]
DEFAULT_HOST_COOLDOWN_MS = DEFAULT_TREASURY_POLICY["x402HostCooldownMs"]
MIN_PAID_WINDOW_S = 5.0  # with a deadline: time the paid request must have left, or nothing is signed
# + host; KV value: the ISO time until which the host is not paid. Each purpose has its own, so a paid fetch the
# model chose cannot stop the top-ups the agent lives on.
COOLDOWN_KEYS = {"x402": "x402_host_cooldown:", "topup": "topup_host_cooldown:"}

log = get_logger(__name__)

Sender = Callable[..., Response]
BalanceReader = Callable[[str], int]


@dataclass
class PaidResponse:
    """The final answer, and the intent behind it when a payment was made."""

    response: Response
    intent: Intent | None = None
    settlement: dict[str, Any] | None = None
    undelivered: str | None = None  # paid without success: what happened, in one plain line


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
        max_validity_s: int = DEFAULT_MAX_VALIDITY_S,
        host_cooldown_ms: int = DEFAULT_HOST_COOLDOWN_MS,
        deadline: float | None = None,
        refuse: str | None = None,
    ) -> None:
        """``deadline`` (a ``time.monotonic()`` value) cuts every request's timeout to the time left; ``refuse``:
        why this payer pays nothing at all (a local-only agent), said for every request that asks for payment."""
        self.db = db
        self.wallet = wallet
        self.balance_of = balance_of
        self.now = now
        self.send = send
        self.timeout = timeout
        self.max_validity_s = max_validity_s
        self.host_cooldown_ms = host_cooldown_ms
        self.deadline = deadline
        self.refuse = refuse
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

        The first request goes without ``body`` (a free resource gets a second request with it). ``balance`` is
        the wallet's USDC when the caller has just read it (saves a second read).
        """
        url = read_url(url).text  # the client connects where the guard and the cool-down look (net/url.py)
        probe = self.send(method, url, headers=headers, timeout=self.request_timeout())
        if probe.status != 402 and body is not None:
            probe = self.send(method, url, json=body, headers=headers, timeout=self.request_timeout())
        if probe.status != 402:
            return PaidResponse(probe)
        if self.refuse:  # before any check or reading: nothing is signed
            raise PaymentRefused("local_only", f"{url} asks for payment; {self.refuse}")

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
            balance=balance if balance is not None else (
                self.balance_of(self.wallet.address) if self.balance_of else None),
        )
        now_s = now_ms // 1000
        host = read_url(url).host
        until = cooldown_until(self.db, purpose, host)
        if until is not None and until > now_ms:
            raise PaymentRefused(
                "cooldown",
                f"{host} took a signed payment without delivering; not paying it again until {to_iso(until)}")
        earlier = blocking_intents(self.db, purpose, url, now_s)
        if earlier:
            raise PaymentRefused(
                "unresolved",
                f"an earlier payment for {url} (intent {earlier[0].id}) may still settle until "
                f"{earlier[0].valid_before}; not paying twice",
            )

        if self.deadline is not None and self.deadline - time.monotonic() < MIN_PAID_WINDOW_S:
            raise PaymentRefused("deadline",
                                 "too little of the allowed time is left to send a paid request; nothing was signed")

        authorization = TransferAuthorization(
            sender=self.wallet.address,
            recipient=requirement.pay_to,
            value=requirement.amount,
            valid_after=max(0, now_s - CLOCK_SKEW_S),
            valid_before=now_s + min(requirement.max_timeout_seconds, self.max_validity_s),
            nonce=new_nonce(),
        )
        with self.db.transaction(durable=True):  # on disk before the signature exists
            intent = record_intent(
                self.db, purpose=purpose, resource=url, network=requirement.network.caip2, asset=requirement.asset,
                authorization=authorization, amount_cents=cents_of(requirement.amount), now_ms=now_ms,
            )
            self.spend.record(category, intent.amount_cents, tool_name, recipient=requirement.pay_to,
                              domain=host, spend_id=intent.id)
        crash_point("intent_stored")
        signature = sign_authorization(self.wallet, authorization, requirement.token_domain())
        crash_point("payment_signed")
        name, value = payment_header(required, requirement, authorization, signature)
        log.info("paying", extra={"intent": intent.id, "resource": url, "amount_atomic": requirement.amount,
                                  "payee": requirement.pay_to, "network": requirement.network.caip2})
        timeout = self.request_timeout()
        try:
            paid = self.send(method, url, json=body, headers={**(headers or {}), name: value}, timeout=timeout,
                             finish_at_stop=True)  # a stop waits for the answer that says whether money left
        except NetworkError as exc:
            self._undelivered(intent, purpose, host, str(exc))
            raise
        crash_point("payment_answered")
        return self._record_answer(intent, paid, requirement, url, purpose)

    def request_timeout(self, cap: float | None = None) -> float:
        """``cap`` (default: ``timeout``) cut to what is left before the deadline; ``NetworkError`` when none is."""
        cap = self.timeout if cap is None else cap
        if self.deadline is None:
            return cap
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise NetworkError("the time allowed for this payment ran out before the request")
        return min(cap, left)

    def _undelivered(self, intent: Intent, purpose: str, host: str, detail: str) -> int:
        """A signature left and no success came back: the intent stays open (spent) and the host cools down until
        the time returned (epoch ms)."""
        now_ms = self.now()
        until = now_ms + self.host_cooldown_ms
        with self.db.transaction(durable=True):
            set_outcome(self.db, intent.id, "unknown", now_ms, detail)
            set_value(self.db, COOLDOWN_KEYS[purpose] + host, to_iso(until), now_ms)
        log.warning("paid request not delivered; the authorization counts as spent",
                    extra={"intent": intent.id, "host": host, "detail": detail[:200]})
        return until

    def _record_answer(self, intent: Intent, paid: Response, paid_for: PaymentRequirement, url: str,
                       purpose: str) -> PaidResponse:
        try:
            settled = settlement(paid.headers)
        except PaymentFormatError:
            settled = None
        tx_hash = settled.get("transaction") if settled and isinstance(settled.get("transaction"), str) else None
        line = None
        if paid.ok:
            resolve(self.db, intent.id, "settled", self.now(), f"HTTP {paid.status}", tx_hash)
        else:  # whatever it asks now, the server holds a valid authorization for what it asked first
            what = answer_after_payment(paid, paid_for, url, settled)
            host = read_url(url).host
            until = self._undelivered(intent, purpose, host, what)
            line = (f"paid {format_usdc(intent.amount_atomic)} USDC to {intent.payee} (payment {intent.id}), and "
                    f"the server answered {what}; nothing more was paid. The payment counts as spent until the chain "
                    f"shows it unused after {to_iso(intent.valid_before * 1000)}, and {host} is not paid again "
                    f"before {to_iso(until)}")
        log.info("payment answered", extra={"intent": intent.id, "status": paid.status, "tx": tx_hash})
        return PaidResponse(paid, intent, settled, line)


def answer_after_payment(answer: Response, paid_for: PaymentRequirement, url: str,
                         settled: Mapping[str, Any] | None = None) -> str:
    """What a paid server answered instead of the resource, in one line: for the ledger, and for the model."""
    said = f"HTTP {answer.status} after payment"
    if answer.status == 402:
        return f"{said}, {_asked_again(answer, paid_for, url, settled)}"
    if 300 <= answer.status < 400:
        where = header_value(answer.headers, "Location")
        return f"{said}, a redirect to {_location(url, where)} (not followed)" if where else f"{said} (a redirect)"
    return said


def _asked_again(answer: Response, paid_for: PaymentRequirement, url: str,
                 settled: Mapping[str, Any] | None) -> str:
    """A second 402 after payment: what it asks that differs from what was signed, or that it asks the same."""
    reason = (settled or {}).get("errorReason")
    try:
        required = parse_payment_required(answer.headers, answer.body, url)
    except PaymentFormatError:
        return "with a payment request that cannot be read"
    asked = choose_requirement(required) or next(iter(required.requirements), None)
    reason = reason if isinstance(reason, str) and reason else required.error
    why = f" ({_plain(reason)})" if reason else ""
    if asked is None:
        return f"asking for nothing that can be paid{why}"
    changes = []
    if asked.amount != paid_for.amount:
        changes.append(f"{format_usdc(asked.amount)} USDC instead of {format_usdc(paid_for.amount)} USDC")
    if asked.pay_to.lower() != paid_for.pay_to.lower():
        changes.append(f"payment to {asked.pay_to} instead of {paid_for.pay_to}")
    if asked.asset.lower() != paid_for.asset.lower():
        changes.append(f"asset {asked.asset} instead of {paid_for.asset}")
    if asked.network != paid_for.network:
        changes.append(f"network {_plain(asked.network_name)} instead of {paid_for.network_name}")
    if asked.scheme != paid_for.scheme:
        changes.append(f"scheme {_plain(asked.scheme)} instead of {paid_for.scheme}")
    if asked.max_timeout_seconds != paid_for.max_timeout_seconds:
        changes.append(f"validity {asked.max_timeout_seconds} s instead of {paid_for.max_timeout_seconds} s")
    return "asking " + ", ".join(changes) if changes else f"asking the same again{why}"


def _location(url: str, where: str) -> str:
    try:
        return read_url(urljoin(url, where.strip())).text[:300]
    except UnreadableUrl:
        return "a location that cannot be read"


def _plain(text: str) -> str:
    """Server text cut to one short printable line."""
    return "".join(c if c.isprintable() else " " for c in text[:80])


def cooldown_until(db: "Database", purpose: str, host: str) -> int | None:
    """Epoch ms until which ``host`` is not paid for ``purpose`` (after it took a signature without delivering)."""
    stamp = get_value(db, COOLDOWN_KEYS[purpose] + host)
    return from_iso(stamp) if stamp else None


def payer_options(policy: Mapping[str, Any]) -> dict[str, int]:
    """The ``Payer`` settings the treasury policy (as loaded, defaults merged) holds: validity cap, host cool-down."""
    policy = policy or DEFAULT_TREASURY_POLICY  # no treasury policy at all: the defaults
    return {"max_validity_s": int(policy["x402MaxValiditySeconds"]),
            "host_cooldown_ms": int(policy["x402HostCooldownMs"])}


def resolve(db: "Database", intent_id: str, status: str, now_ms: int, detail: str = "",
            tx_hash: str | None = None) -> None:
    """Record an intent's outcome, synced; a payment that never happened leaves the spend record too."""
    with db.transaction(durable=True):
        set_outcome(db, intent_id, status, now_ms, detail, tx_hash)
        if status in ("rejected", "expired"):
            SpendTracker(db).forget(intent_id)


def reconcile_open_intents(db: "Database", used: Callable[[Intent], bool],
                           now: Clock = system_now) -> list[tuple[str, str]]:
    """Resolve open intents from the chain (``used(intent)`` asks ``authorizationState``): used nonces settled,
    unused ones past their window expired. One still inside its window, or whose state cannot be read (node down,
    time up), stays open. Returns ``(intent id, new status)`` for every change.
    """
    changes = []
    for intent in open_intents(db):
        if network_named(intent.network) is None:
            continue
        now_ms = now()
        try:
            was_used = used(intent)
        except (AutomatonError, OSError) as exc:  # unreadable now; it stays open and counted as spent
            log.warning("payment intent not reconciled", extra={"intent": intent.id, "error": str(exc)})
            continue
        if was_used:
            resolve(db, intent.id, "settled", now_ms, "nonce used on chain")
            changes.append((intent.id, "settled"))
        elif intent.valid_before <= now_ms // 1000:
            resolve(db, intent.id, "expired", now_ms, "window closed, nonce never used")
            changes.append((intent.id, "expired"))
    return changes

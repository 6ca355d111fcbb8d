"""Buying Conway credits with USDC through x402: ``GET {conwayApiUrl}/pay/{usd}/{address}``.

The signed amount must equal the tier exactly, the USDC balance is checked first, and a settled top-up is recorded
in ``transactions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from automaton_min.chain.usdc import ATOMIC_PER_USDC, BASE, Network, format_usdc
from automaton_min.clock import HOUR_MS, MINUTE_MS, to_iso
from automaton_min.errors import RuntimeFailure, UserError
from automaton_min.ids import new_ulid
from automaton_min.net.http import snippet
from automaton_min.log import get_logger
from automaton_min.treasury.guard import Allowance, PaymentRefused
from automaton_min.treasury.ledger import recent_intents
from automaton_min.treasury.money_out import TOPUP_TIERS_USD, topup_limits
from automaton_min.treasury.payer import Payer

if TYPE_CHECKING:
    from automaton_min.store.db import Database

INLINE_TOPUP_COOLDOWN_MS = MINUTE_MS  # the agent's own top-up attempts, at most one a minute
TOPUP_ATTEMPT_KEY = "last_inline_topup_attempt"
BOOTSTRAP_THRESHOLD_CENTS = 500
BOOTSTRAP_TIER_USD = 5
BOOTSTRAP_REPEAT_MS = HOUR_MS  # an automatic top-up is not repeated within this long of the last one

log = get_logger(__name__)


class TopupFailed(RuntimeFailure):
    """The top-up was paid for but not answered with success, or could not be paid."""


@dataclass(frozen=True)
class TopupResult:
    usd: int
    credits_cents_added: int
    intent_id: str | None
    tx_hash: str | None


def topup(payer: Payer, api_url: str, usd: int, network: Network = BASE, *,
          progress: Callable[[str], None] | None = None) -> TopupResult:
    """Buy ``usd`` dollars of credits for the payer's own address; ``progress`` hears of each slow step."""
    say = progress or (lambda _text: None)
    if usd not in TOPUP_TIERS_USD:
        tiers = ", ".join(f"${t}" for t in TOPUP_TIERS_USD)
        raise UserError(f"top-up amount ${usd} is not a tier; choose one of {tiers}")
    if payer.refuse:  # before any request: a top-up always pays
        raise PaymentRefused("local_only", f"top-up of ${usd}: {payer.refuse}")
    amount = usd * ATOMIC_PER_USDC
    say("reading the wallet's USDC balance ...")
    balance = payer.balance_of(payer.wallet.address) if payer.balance_of is not None else None
    if balance is not None and balance < amount:
        raise PaymentRefused("balance", f"the wallet holds {format_usdc(balance)} USDC, less than the ${usd} top-up")
    url = f"{api_url.rstrip('/')}/pay/{usd}/{payer.wallet.address}"
    say(f"paying ${usd} in USDC to {url} and waiting for settlement ...")
    allowance = Allowance(max_amount=amount, asset=network.usdc, network=network.caip2, exact_amount=True)
    paid = payer.fetch(url, allowance=allowance, limits=topup_limits(api_url), purpose="topup", balance=balance)
    if paid.undelivered is not None:
        raise TopupFailed(f"top-up of ${usd} failed: {url}: {paid.undelivered}")
    if not paid.response.ok:
        raise TopupFailed(f"top-up of ${usd} failed: {url} answered {paid.response.status}: "
                          f"{snippet(paid.response.body)}")
    if paid.intent is None:
        raise TopupFailed(f"top-up of ${usd}: {url} answered {paid.response.status} without asking for payment; "
                          "nothing was paid")

    added = usd * 100
    try:
        answer = paid.response.json()
    except RuntimeFailure:
        answer = {}
    if isinstance(answer, dict):
        reported = answer.get("credits_cents", answer.get("amount_cents"))
        if isinstance(reported, int) and not isinstance(reported, bool) and reported >= 0:
            added = reported
    tx_hash = paid.settlement.get("transaction") if paid.settlement else None
    _record_transaction(payer.db, usd, added, paid.intent.id, tx_hash, payer.now())
    log.info("topped up credits", extra={"usd": usd, "credits_cents": added, "intent": paid.intent.id})
    return TopupResult(usd, added, paid.intent.id, tx_hash)


def _record_transaction(db: "Database", usd: int, cents: int, intent_id: str, tx_hash: str | None, now_ms: int) -> None:
    description = f"credit top-up ${usd} via x402 (intent {intent_id}{', tx ' + tx_hash if tx_hash else ''})"
    with db.transaction():
        db.execute(
            "INSERT INTO transactions (id, type, amount_cents, balance_after_cents, description, created_at)"
            " VALUES (?, 'topup', ?, NULL, ?, ?)",
            (new_ulid(now_ms), cents, description, to_iso(now_ms)),
        )


def bootstrap_topup(payer: Payer, api_url: str, credits_cents: int, usdc_atomic: int) -> TopupResult | None:
    """With credits under $5 and at least $5 of USDC, buy $5 of credits (at start, and when low or dead).

    Nothing is bought when a top-up was paid, or may still settle, within the last hour (credits can show late).
    Synchronous, within the payer's deadline: no payment is left running after giving up.
    """
    if credits_cents >= BOOTSTRAP_THRESHOLD_CENTS or usdc_atomic < BOOTSTRAP_TIER_USD * ATOMIC_PER_USDC:
        return None
    earlier = recent_intents(payer.db, "topup", payer.now() - BOOTSTRAP_REPEAT_MS)
    if earlier:
        log.info("bootstrap top-up skipped: a recent top-up exists", extra={"intent": earlier[-1].id})
        return None
    return topup(payer, api_url, BOOTSTRAP_TIER_USD)

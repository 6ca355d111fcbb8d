"""Money out (README: Payments, Credit transfers): every rule on credits or USDC leaving, and ``transfer_credits``,
the one call that sends credits. A check answers ``None`` or a ``Refusal``, which each caller renders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from automaton_min.chain.address import is_address
from automaton_min.clock import DAY_MS, HOUR_MS, to_iso
from automaton_min.config import DEFAULT_TREASURY_POLICY
from automaton_min.crashpoint import crash_point
from automaton_min.fileio import held_exclusively
from automaton_min.errors import RuntimeFailure
from automaton_min.ids import new_ulid
from automaton_min.net.url import read_url
from automaton_min.store.children import record_funding
from automaton_min.treasury.payees import CONFIG_KEY, KnownPayees
from automaton_min.treasury.spend import SpendTracker

if TYPE_CHECKING:
    from automaton_min.conway.client import ConwayClient, TransferResult
    from automaton_min.store.db import Database

TOPUP_TIERS_USD = (5, 25, 100, 500, 1000, 2500)  # the amounts Conway sells credits in

# The policy's two quarantines of a transfer; each becomes an approval request (social/approvals.py).
UNKNOWN_PAYEE = "UNKNOWN_PAYEE"
CONFIRMATION_REQUIRED = "CONFIRMATION_REQUIRED"

# Refusal codes, one per reason.
BAD_ADDRESS = "bad_address"
BAD_AMOUNT = "bad_amount"
PAYEE_NOT_KNOWN = "unknown_payee"
NOT_A_CHILD = "not_a_child"
NEEDS_CONFIRMATION = "needs_confirmation"
OVER_SINGLE_CAP = "over_single_cap"
OVER_TURN_COUNT = "over_turn_count"
COOLING_DOWN = "cooling_down"
OVER_HOURLY_CAP = "over_hourly_cap"
OVER_DAILY_CAP = "over_daily_cap"
BALANCE_UNKNOWN = "balance_unknown"
BELOW_RESERVE = "below_reserve"
HALF_BALANCE = "half_balance"


@dataclass(frozen=True)
class Refusal:
    """Why money may not leave: ``code``, the ``setting`` (a treasuryPolicy key) behind it, and the numbers."""

    code: str
    setting: str | None = None
    amount: int = 0  # cents asked
    limit: int = 0  # the limit: cents, ms or a count
    spent: int = 0  # cents spent in the window, transfers this turn, or ms since the last transfer
    balance: int | None = None  # cents
    to: str = ""
    what: str = "transfer cap"  # the cap's name in a sentence

    def sentence(self) -> str:
        """The plain rendering (the tool's, the policy's and the approvals' words)."""
        return _SENTENCES[self.code](self)


_SENTENCES: dict[str, Callable[[Refusal], str]] = {
    BAD_ADDRESS: lambda r: "to_address must be a 0x-prefixed 40-hex-digit address",
    BAD_AMOUNT: lambda r: "a transfer must be a positive number of cents",
    PAYEE_NOT_KNOWN: lambda r: (
        f"{r.to} is not a known payee (known payees: the creator, the addresses in {CONFIG_KEY}, and those the "
        "creator added with a signed 'payee add' message), so credits go there only with the creator's approval"),
    NOT_A_CHILD: lambda r: f"{r.to} is not one of your verified children",
    NEEDS_CONFIRMATION: lambda r: (
        f"{r.amount} cents" + (f", with the {r.spent} sent to {r.to} in the last hour," if r.spent else "")
        + f" is above requireConfirmationAboveCents ({r.limit}); it needs the creator's confirmation"),
    OVER_SINGLE_CAP: lambda r: f"{r.amount} cents is above the per-{r.what} of {r.limit} cents",
    OVER_TURN_COUNT: lambda r: f"already {r.spent} transfers this turn (limit {r.limit})",
    COOLING_DOWN: lambda r: f"the last transfer was {r.spent} ms ago; wait {r.limit} ms between transfers",
    OVER_HOURLY_CAP: lambda r: f"hourly {r.what}: {r.spent} + {r.amount} cents would pass the limit of {r.limit} cents",
    OVER_DAILY_CAP: lambda r: f"daily {r.what}: {r.spent} + {r.amount} cents would pass the limit of {r.limit} cents",
    BALANCE_UNKNOWN: lambda r: "the credit balance is unknown, so the minimum reserve cannot be checked",
    BELOW_RESERVE: lambda r: (f"transferring would leave {(r.balance or 0) - r.amount} cents, below the reserve of "
                              f"{r.limit} cents"),
    HALF_BALANCE: lambda r: (f"{r.amount} cents is more than half of your balance of {r.balance} cents; keeping "
                             "yourself alive comes first"),
}


class TransferRefused(RuntimeFailure):
    """The transfer was refused before anything was sent."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(f"transfer refused: {refusal.sentence()}")
        self.refusal = refusal


def treasury_policy(config: Any) -> Mapping[str, Any]:
    """The treasury policy of ``config`` (a ``Config`` or its values, defaults merged at load); no config: the
    defaults."""
    policy = config.get("treasuryPolicy") if config is not None else None
    return policy if isinstance(policy, Mapping) else DEFAULT_TREASURY_POLICY


def definitely_refused(exc: Any) -> bool:
    """Whether a Conway error says the transfer did not happen (a 4xx other than 429); otherwise it may have."""
    status = getattr(exc, "status", None)
    return status is not None and 400 <= status < 500 and status != 429


# --------------------------------------------------------------------------- credit transfers


def payee_refusal(payees: KnownPayees, to: Any, *, approval: str | None = None) -> Refusal | None:
    """A transfer goes to a known payee, or to any address the creator approved for this very transfer."""
    if not isinstance(to, str) or not is_address(to):
        return Refusal(BAD_ADDRESS)
    if approval is None and payees.why_known(to) is None:
        return Refusal(PAYEE_NOT_KNOWN, to=to)
    return None


def confirmation_refusal(spend: SpendTracker, policy: Mapping[str, Any], to: Any, amount: int) -> Refusal | None:
    """Above ``requireConfirmationAboveCents``, counting what went to ``to`` in the last hour (pieces add up), a
    transfer waits for the creator's confirmation."""
    threshold = policy["requireConfirmationAboveCents"]
    sent = spend.spent("transfer", HOUR_MS, recipient=to) if isinstance(to, str) else 0
    if amount + sent <= threshold:
        return None
    return Refusal(NEEDS_CONFIRMATION, "requireConfirmationAboveCents", amount, threshold, sent, to=str(to))


def _window(spend: SpendTracker, category: str, amount: int, limit: int, hourly: bool, setting: str,
            what: str) -> Refusal | None:
    spent = spend.spent(category, HOUR_MS if hourly else DAY_MS)
    if spent + amount <= limit:
        return None
    return Refusal(OVER_HOURLY_CAP if hourly else OVER_DAILY_CAP, setting, amount, limit, spent, what=what)


def limit_refusal(spend: SpendTracker, policy: Mapping[str, Any], amount: Any, *, transfers_this_turn: int,
                  balance_cents: int | None) -> Refusal | None:
    """Every limit on a transfer of ``amount`` cents, in this order: size, per turn, cool-down, hourly, daily,
    reserve (an unknown balance fails closed), never more than half the balance."""
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        return Refusal(BAD_AMOUNT)
    cap, most, cooldown = policy["maxSingleTransferCents"], policy["maxTransfersPerTurn"], policy["transferCooldownMs"]
    if amount > cap:
        return Refusal(OVER_SINGLE_CAP, "maxSingleTransferCents", amount, cap)
    if transfers_this_turn >= most:
        return Refusal(OVER_TURN_COUNT, "maxTransfersPerTurn", amount, most, transfers_this_turn)
    last = spend.last_spend_ms("transfer")
    if cooldown and last is not None and spend.now() - last < cooldown:
        return Refusal(COOLING_DOWN, "transferCooldownMs", amount, cooldown, spend.now() - last)
    refusal = (_window(spend, "transfer", amount, policy["maxHourlyTransferCents"], True, "maxHourlyTransferCents",
                       "transfer cap")
               or _window(spend, "transfer", amount, policy["maxDailyTransferCents"], False, "maxDailyTransferCents",
                          "transfer cap"))
    return refusal or balance_refusal(policy, amount, balance_cents)


def balance_refusal(policy: Mapping[str, Any], amount: int, balance_cents: int | None) -> Refusal | None:
    """The reserve (an unknown balance fails closed), and never more than half the balance."""
    reserve = policy["minimumReserveCents"]
    if balance_cents is None:
        return Refusal(BALANCE_UNKNOWN, "minimumReserveCents", amount, reserve)
    if balance_cents - amount < reserve:
        return Refusal(BELOW_RESERVE, "minimumReserveCents", amount, reserve, balance=balance_cents)
    if amount * 2 > balance_cents:
        return Refusal(HALF_BALANCE, None, amount, balance_cents // 2, balance=balance_cents)
    return None


def transfer_refusal(spend: SpendTracker, policy: Mapping[str, Any], payees: KnownPayees, *, to_address: Any,
                     amount_cents: Any, transfers_this_turn: int, balance_cents: int | None,
                     approval: str | None = None) -> Refusal | None:
    """The payee, then every limit: what ``transfer_credits`` checks before it sends anything."""
    return (payee_refusal(payees, to_address, approval=approval)
            or limit_refusal(spend, policy, amount_cents, transfers_this_turn=transfers_this_turn,
                             balance_cents=balance_cents))


def _one_transfer_at_a_time(db: "Database"):
    """A lock file beside ``state.db``: transfers of any process or thread wait for each other."""
    return held_exclusively(f"{db.path}.transfers.lock")


def transfer_credits(db: "Database", client: "ConwayClient", policy: Mapping[str, Any], *, to_address: str,
                     amount_cents: int, note: str | None, transfers_this_turn: int, payees: KnownPayees,
                     approval: str | None = None, spend: SpendTracker | None = None,
                     idempotency_key: str | None = None) -> "TransferResult":
    """Send credits if, and only if, ``transfer_refusal`` finds nothing (``approval``: the creator's approval
    request that stands in for a known payee).

    Under ``_one_transfer_at_a_time``: the balance is read live, checked, the spend recorded and the call made, so
    no other transfer sees a balance from before this one. The spend is recorded before the call, so a crash in the
    middle can only over-count; it is removed again only when Conway definitely refused the transfer.

    ``idempotency_key`` names the transfer for good (a child's funding): when a spend of that name is already
    recorded, a crash or an unanswered call came between the record and the answer, and the same request is sent
    again under the same key (Conway answers it once), for exactly the recorded amount and payee, if it passes every
    check as a new transfer would, the creator's confirmation threshold included; it is then counted from now.
    """
    from automaton_min.conway.client import ConwayError

    spend = spend or SpendTracker(db)
    with _one_transfer_at_a_time(db):
        earlier = _recorded(db, idempotency_key)
        if earlier is not None and earlier != (amount_cents, to_address.lower()):
            raise ValueError(f"transfer {idempotency_key} was recorded for {earlier[0]} cents to {earlier[1]}")
        try:
            balance: int | None = client.credits_balance()
        except RuntimeFailure:
            balance = None
        with db.transaction(durable=True):
            if earlier is not None:  # checked again as if new, and counted from now; refused, it stays as it was
                spend.forget(idempotency_key)
            refusal = (transfer_refusal(spend, policy, payees, to_address=to_address, amount_cents=amount_cents,
                                        transfers_this_turn=transfers_this_turn, balance_cents=balance,
                                        approval=approval)
                       or (confirmation_refusal(spend, policy, to_address, amount_cents) if earlier else None))
            if refusal:
                raise TransferRefused(refusal)  # rolls a forgetting back
            spend_id = spend.record("transfer", amount_cents, "transfer_credits", recipient=to_address,
                                    spend_id=idempotency_key)
        try:
            result = client.transfer_credits(to_address, amount_cents, note, idempotency_key=idempotency_key)
        except ConwayError as exc:
            if definitely_refused(exc):
                with db.transaction():
                    spend.forget(spend_id)
            raise
        crash_point("transfer.answered")  # sent and answered, not yet recorded
    now_ms = spend.now()
    ident = f", {result.transfer_id}" if result.transfer_id else ""
    with db.transaction():
        db.execute("INSERT INTO transactions (id, type, amount_cents, balance_after_cents, description, created_at)"
                   " VALUES (?, 'transfer_out', ?, ?, ?, ?)",
                   (new_ulid(now_ms), amount_cents, result.balance_after_cents,
                    f"credits to {to_address} ({result.status}{ident})", to_iso(now_ms)))
        record_funding(db, to_address, amount_cents, f"{amount_cents} cents sent ({result.status}{ident})", now_ms,
                       name=idempotency_key)
    return result


def _recorded(db: "Database", spend_id: str | None) -> tuple[int, str] | None:
    """(cents, payee) of the spend already recorded under ``spend_id``."""
    row = db.query_one("SELECT amount_cents, lower(recipient) FROM spend_tracking WHERE id = ?",
                       (spend_id,)) if spend_id else None
    return (int(row[0]), str(row[1])) if row else None


def transfer_to_child(db: "Database", client: "ConwayClient", policy: Mapping[str, Any], *, child: str,
                      amount_cents: int, note: str | None, transfers_this_turn: int, payees: KnownPayees,
                      spend: SpendTracker | None = None, idempotency_key: str | None = None) -> "TransferResult":
    """The entry point of ``fund_child``: credits to a payee of kind child (one of ``payees.children``), under every
    limit of ``transfer_credits``."""
    if not isinstance(child, str) or child.lower() not in payees.children:
        raise TransferRefused(Refusal(NOT_A_CHILD, to=str(child)[:100]))
    return transfer_credits(db, client, policy, to_address=child, amount_cents=amount_cents, note=note,
                            transfers_this_turn=transfers_this_turn, payees=payees, spend=spend,
                            idempotency_key=idempotency_key)


# --------------------------------------------------------------------------- USDC (x402, top-ups) and inference


@dataclass(frozen=True)
class Limits:
    """Treasury limits on one kind of USDC payment (``None``: not limited by this rule), in cents."""

    per_payment_cents: int | None = None
    hourly_cents: int | None = None
    daily_cents: int | None = None
    minimum_reserve_cents: int | None = None
    allowed_domains: tuple[str, ...] | None = None


def x402_limits(policy: Mapping[str, Any]) -> Limits:
    """Payments the agent makes on its own (x402 fetches): the per-payment cap, 10x it an hour, 50x a day."""
    per_payment = int(policy["maxX402PaymentCents"])
    return Limits(per_payment_cents=per_payment, hourly_cents=per_payment * 10, daily_cents=per_payment * 50,
                  minimum_reserve_cents=int(policy["minimumReserveCents"]),
                  allowed_domains=tuple(policy["x402AllowedDomains"]))


def topup_limits(api_url: str) -> Limits:
    """Top-ups go only to the configured Conway API; the tier fixes the amount."""
    return Limits(allowed_domains=(read_url(api_url).host,))


def x402_refusal(spend: SpendTracker, policy: Mapping[str, Any], asked: Any = None) -> Refusal | None:
    """Before a paid fetch: ``asked`` (its ``max_payment_cents``) within the per-payment cap, and room for at
    least one cent in the hourly and daily x402 windows (the guard checks the real amount before signing)."""
    limits = x402_limits(policy)
    cap = limits.per_payment_cents or 0
    if isinstance(asked, int) and not isinstance(asked, bool) and asked > cap:
        return Refusal(OVER_SINGLE_CAP, "maxX402PaymentCents", asked, cap, what="payment cap")
    return (_window(spend, "x402", 1, limits.hourly_cents or 0, True, "maxX402PaymentCents", "x402 cap")
            or _window(spend, "x402", 1, limits.daily_cents or 0, False, "maxX402PaymentCents", "x402 cap"))


def inference_refusal(spend: SpendTracker, policy: Mapping[str, Any], estimate: int) -> Refusal | None:
    """The daily inference budget, and a sixth of it in any hour."""
    daily = policy["maxInferenceDailyCents"]
    return (_window(spend, "inference", estimate, -(-daily // 6), True, "maxInferenceDailyCents",
                    "share of the inference budget")
            or _window(spend, "inference", estimate, daily, False, "maxInferenceDailyCents", "inference budget"))

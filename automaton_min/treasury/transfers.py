"""Credit transfers under the treasury policy: the one path by which credits leave.

Credits go only to a known payee (``treasury.payees``) unless the creator approved this very transfer (the
approval request's id is passed), and every limit is checked before anything is sent. The spend is recorded before the
call, so a crash in the middle can only over-count, never under-count; it is
removed again only when the API definitely refused the transfer (a 4xx answer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from automaton_min.chain.address import is_address
from automaton_min.clock import to_iso
from automaton_min.conway.client import ConwayClient, ConwayError, TransferResult
from automaton_min.errors import RuntimeFailure
from automaton_min.ids import new_ulid
from automaton_min.treasury.payees import UNKNOWN_PAYEE, KnownPayees
from automaton_min.treasury.spend import SpendTracker

if TYPE_CHECKING:
    from automaton_min.store.db import Database



class TransferRefused(RuntimeFailure):
    """The treasury policy refused the transfer before anything was sent; ``limit`` names the rule."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(f"transfer refused: {message}")
        self.limit = limit


def transfer_credits(db: "Database", client: ConwayClient, policy: Mapping[str, Any], *, to_address: str, amount_cents: int,
                     note: str | None, transfers_this_turn: int, balance_cents: int | None, payees: KnownPayees,
                     approval: str | None = None, spend: SpendTracker | None = None) -> TransferResult:
    """Send credits if, and only if, the payee is known (or ``approval`` names the creator's approval) and every
    treasury limit allows it; record the spend and the transaction."""
    if not isinstance(to_address, str) or not is_address(to_address):
        raise TransferRefused("to_address", "to_address must be a 0x-prefixed 40-hex-digit address")
    if approval is None and payees.why_known(to_address) is None:
        raise TransferRefused(UNKNOWN_PAYEE, payees.refusal(to_address))
    spend = spend or SpendTracker(db)
    denial = spend.check_transfer(amount_cents, policy, transfers_this_turn=transfers_this_turn, balance_cents=balance_cents)
    if denial:
        raise TransferRefused(denial.limit, denial.message)
    with db.transaction(durable=True):
        spend_id = spend.record("transfer", amount_cents, "transfer_credits", recipient=to_address)
    try:
        result = client.transfer_credits(to_address, amount_cents, note)
    except ConwayError as exc:
        if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
            with db.transaction():
                spend.forget(spend_id)
        raise
    now_ms = spend.now()
    with db.transaction():
        db.execute(
            "INSERT INTO transactions (id, type, amount_cents, balance_after_cents, description, created_at) VALUES (?, 'transfer_out', ?, ?, ?, ?)",
            (new_ulid(now_ms), amount_cents, result.balance_after_cents,
             f"credits to {to_address} ({result.status}{', ' + result.transfer_id if result.transfer_id else ''})", to_iso(now_ms)),
        )
    return result

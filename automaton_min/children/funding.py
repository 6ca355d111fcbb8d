"""Funding a child: credits to its verified wallet through the one money-out path, with every treasury limit
(README: Children); the child's row keeps what it was given."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from automaton_min.children.lifecycle import transition
from automaton_min.errors import UserError
from automaton_min.store.children import FUNDABLE, get_child

if TYPE_CHECKING:
    from automaton_min.conway.client import ConwayClient, TransferResult
    from automaton_min.store.sqlite import Database
    from automaton_min.treasury.spend import SpendTracker


def fund_child(db: "Database", client: "ConwayClient", policy: Mapping[str, Any], config: Any, *, child_id: str,
               amount_cents: int, note: str | None, transfers_this_turn: int, now_ms: int,
               spend: "SpendTracker | None" = None) -> "TransferResult":
    """Send ``amount_cents`` to the child's verified wallet (``money_out.transfer_to_child``: limits, half the
    balance, the approval threshold); ``UserError`` for a child that may not be funded, ``TransferRefused`` for a
    limit. Its first funding moves it to ``funded``."""
    from automaton_min.treasury.money_out import transfer_to_child
    from automaton_min.treasury.payees import known_payees

    child = get_child(db, child_id)
    if child is None:
        raise UserError(f"no child {child_id}; list_children names them")
    if child.status not in FUNDABLE or not child.address:
        raise UserError(f"child {child.name} is {child.status}: only a child whose wallet was verified and that is "
                        f"not stopped or gone is funded ({', '.join(FUNDABLE)})")
    result = transfer_to_child(db, client, policy, child=child.address, amount_cents=amount_cents, note=note,
                               transfers_this_turn=transfers_this_turn, payees=known_payees(db, config), spend=spend)
    with db.transaction():
        db.execute("UPDATE children SET funded_amount_cents = funded_amount_cents + ? WHERE id = ?",
                   (result.amount_cents, child.id))
        if child.status == "wallet_verified":
            transition(db, child.id, "funded", f"{result.amount_cents} cents sent (transfer {result.transfer_id})",
                       now_ms)
    return result

"""Funding a child: credits to its verified wallet through the one money-out path, with every treasury limit
(README: Children). Each funding is named before it is sent (KV ``child_funding.<id>``), so a parent killed while
the transfer was on its way sends the same request again, under the same Idempotency-Key, and never pays twice; the
name ends in the transaction that records the funding, so one recorded is never sent or recorded again."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from automaton_min.crashpoint import crash_point
from automaton_min.errors import UserError
from automaton_min.fileio import held_exclusively
from automaton_min.ids import new_ulid
from automaton_min.store.children import FUNDABLE, FUNDING_PREFIX, Child, get_child
from automaton_min.store.kv import delete_value, get_value, set_value

if TYPE_CHECKING:
    from automaton_min.conway.client import ConwayClient, TransferResult
    from automaton_min.store.sqlite import Database
    from automaton_min.treasury.spend import SpendTracker


def fund_child(db: "Database", client: "ConwayClient", policy: Mapping[str, Any], config: Any, *, child_id: str,
               amount_cents: int, note: str | None, transfers_this_turn: int, now_ms: int,
               spend: "SpendTracker | None" = None) -> "TransferResult":
    """Send ``amount_cents`` to the child's verified wallet (``money_out.transfer_to_child``: limits, half the
    balance, the approval threshold); ``UserError`` for a child that may not be funded, ``TransferRefused`` for a
    limit. A funding interrupted earlier is finished first (or dropped, when the limits now refuse it)."""
    from automaton_min.conway.client import ConwayError
    from automaton_min.treasury.money_out import TransferRefused, definitely_refused, transfer_to_child
    from automaton_min.treasury.payees import known_payees

    with _one_funding_at_a_time(db):
        child = _fundable(db, child_id)
        try:
            earlier = _finish(db, client, policy, config, child, spend)
        except TransferRefused:
            earlier = None  # that one is dropped; this one is checked on its own
        if earlier is not None:  # the policy checked only this one: one funding per call
            raise UserError(f"an earlier funding of {earlier.amount_cents} cents to {child.name}, interrupted, was "
                            "sent now instead; this one was not: ask again if the child needs more")
        key = f"fund-{child.id}-{new_ulid(now_ms)}"
        with db.transaction(durable=True):
            set_value(db, FUNDING_PREFIX + child.id, key, now_ms)
        crash_point("child.funding_named")
        try:
            result = transfer_to_child(db, client, policy, child=child.address, amount_cents=amount_cents, note=note,
                                       transfers_this_turn=transfers_this_turn, payees=known_payees(db, config),
                                       spend=spend, idempotency_key=key)
        except ConwayError as exc:
            if definitely_refused(exc):
                _forget(db, child.id)
            raise  # an unknown outcome keeps the name: the next funding or health check sends it again, once
        except TransferRefused:
            _forget(db, child.id)
            raise
        crash_point("child.funding_recorded")  # its record ended its name: nothing is left to send again
        return result


def finish_interrupted(db: "Database", client: "ConwayClient", policy: Mapping[str, Any], config: Any, child: Child,
                       *, spend: "SpendTracker | None" = None) -> "TransferResult | None":
    """The funding a killed parent (or an unanswered call) left on its way, sent again under its own key (Conway
    answers it once); ``None`` when there was none, or when it never got as far as its spend record (nothing was
    sent); ``TransferRefused`` (and it is dropped) when the balance it would leave no longer passes. It waits for
    a funding in progress, which leaves nothing to finish."""
    with _one_funding_at_a_time(db):
        return _finish(db, client, policy, config, child, spend)


def _finish(db: "Database", client: "ConwayClient", policy: Mapping[str, Any], config: Any, child: Child,
            spend: "SpendTracker | None") -> "TransferResult | None":
    from automaton_min.treasury.money_out import TransferRefused, transfer_to_child
    from automaton_min.treasury.payees import known_payees

    key = get_value(db, FUNDING_PREFIX + child.id)
    if not key:
        return None
    row = db.query_one("SELECT amount_cents FROM spend_tracking WHERE id = ?", (key,))
    if row is None or not child.address:
        _forget(db, child.id)
        return None
    try:
        result = transfer_to_child(db, client, policy, child=child.address, amount_cents=int(row[0]), note=None,
                                   transfers_this_turn=0, payees=known_payees(db, config), spend=spend,
                                   idempotency_key=key)
    except TransferRefused:
        _forget(db, child.id)
        raise
    return result


def _one_funding_at_a_time(db: "Database"):
    """A lock file beside ``state.db``: a turn's funding and the heartbeat's finishing of an interrupted one never
    overlap (the heartbeat then finds the name cleared)."""
    return held_exclusively(f"{db.path}.child-funding.lock")


def _fundable(db: "Database", child_id: str) -> Child:
    child = get_child(db, child_id)
    if child is None:
        raise UserError(f"no child {child_id}; list_children names them")
    if child.status not in FUNDABLE or not child.address:
        raise UserError(f"child {child.name} is {child.status}: only a child whose wallet was verified and that is "
                        f"not stopped or gone is funded ({', '.join(FUNDABLE)})")
    return child


def _forget(db: "Database", child_id: str) -> None:
    with db.transaction():
        delete_value(db, FUNDING_PREFIX + child_id)

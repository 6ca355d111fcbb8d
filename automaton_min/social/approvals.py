"""Creator approvals (README: Creator approvals): a transfer the policy quarantines waits for ``approve <id>``.

    pending --approve (verified, before expires_at)--> approved --claimed once--> releasing --> released | failed
        +--reject--> rejected            +--expires_at passes--> expired

``decide`` runs inside intake's transaction. ``release_approved`` claims each approved row in its own UPDATE, then
sends through ``money_out.transfer_credits`` (the approval stands in for a known payee): a crash during the call
leaves the row ``releasing``, never retried.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Mapping

import orjson

from automaton_min.clock import HOUR_MS, Clock, to_iso
from automaton_min.config import relay_url
from automaton_min.ids import new_ulid
from automaton_min.treasury.money_out import CONFIRMATION_REQUIRED, UNKNOWN_PAYEE
from automaton_min.store.children import fundable_addresses, names_by_address
from automaton_min.treasury.payees import known_payees

if TYPE_CHECKING:
    from automaton_min.store.db import Database

DEFAULT_EXPIRY_HOURS = 24
EXPIRY_KEY = "approvalExpiryHours"
KINDS = ("transfer_credits",)
HELD_CODES = (CONFIRMATION_REQUIRED, UNKNOWN_PAYEE)  # the policy's quarantines that become approval requests


def _setting(config: Any, key: str) -> Any:
    return config.get(key) if config is not None else None


def expiry_ms(config: Any) -> int:
    hours = _setting(config, EXPIRY_KEY)
    return int(hours if isinstance(hours, int) and hours > 0 else DEFAULT_EXPIRY_HOURS) * HOUR_MS


def _params_hash(kind: str, params: Mapping[str, Any]) -> str:
    return hashlib.sha256(kind.encode() + b"\0" + orjson.dumps(dict(params), option=orjson.OPT_SORT_KEYS)).hexdigest()


def hold(db: "Database", config: Any, kind: str, params: Mapping[str, Any], amount_cents: int, *, reason: str,
         now_ms: int) -> str:
    """Store (or find) the pending request for this call, with ``reason`` (``"CODE: why"``); the text the agent
    reads."""
    creator = _setting(config, "creatorAddress")
    if not creator or not relay_url(config):
        return (f"{reason}. The creator's approval arrives over the social relay; with no creatorAddress or no "
                "socialRelayUrl (or localOnly true) it cannot be approved: refused, nothing was sent")
    digest = _params_hash(kind, params)
    with db.transaction():
        row = db.query_one("SELECT id, expires_at FROM pending_approvals WHERE status = 'pending' AND kind = ?"
                           " AND params_hash = ? AND expires_at > ? ORDER BY created_at DESC LIMIT 1",
                           (kind, digest, to_iso(now_ms)))
        if row is None:
            request_id, expires = "apr_" + new_ulid(now_ms), to_iso(now_ms + expiry_ms(config))
            db.execute("INSERT INTO pending_approvals (id, kind, params, params_hash, amount_cents, status, created_at,"
                       " expires_at, reason) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
                       (request_id, kind, orjson.dumps(dict(params)).decode(), digest, amount_cents, to_iso(now_ms),
                        expires, reason[:1000]))
        else:
            request_id, expires = row
    return (f"{reason}. This transfer of {amount_cents} cents was NOT made. It waits as approval request "
            f"{request_id} until {expires}. Tell your creator ({creator}) "
            f"with send_message: they release it by sending you, signed from their address, exactly: "
            f"approve {request_id}  (or: reject {request_id}). Do not call the transfer again; it runs by itself "
            "once approved, within the treasury limits.")


def hold_quarantined(db: "Database", config: Any, tool: str, arguments: Mapping[str, Any], reason_code: str,
                     message: str, *, now_ms: int) -> str:
    """The refusal text for a quarantined call: a pending approval for a transfer that needs one, else the refusal."""
    amount = arguments.get("amount_cents")
    if reason_code not in HELD_CODES or tool not in (*KINDS, "fund_child") or not isinstance(amount, int):
        return f"{reason_code}: {message}"
    params = {k: arguments[k] for k in ("to_address", "amount_cents", "reason") if k in arguments}
    if tool == "fund_child":  # held as the transfer to the child's verified wallet it is
        from automaton_min.store.children import fundable_child

        child = fundable_child(db, arguments.get("child_id"))
        if child is None:
            return f"{reason_code}: {message}"
        why = f": {arguments['reason']}" if arguments.get("reason") else ""
        params.update(to_address=child.address, child_id=child.id, reason=f"fund child {child.name}{why}")
    return hold(db, config, "transfer_credits", params, amount, reason=f"{reason_code}: {message}", now_ms=now_ms)


def decide(db: "Database", command: tuple[str, str], *, message_id: str, now_ms: int) -> str:
    """Apply the creator's verified ``approve``/``reject``; a short note on what happened (nothing for a mismatch)."""
    verb, request_id = command
    status = "approved" if verb == "approve" else "rejected"
    db.execute("UPDATE pending_approvals SET status = ?, decided_by_message = ?, decided_at = ?"
               " WHERE id = ? AND status = 'pending' AND expires_at > ?",
               (status, message_id, to_iso(now_ms), request_id, to_iso(now_ms)))
    if db.connection.changes() == 1:
        return f"approval request {request_id} {status}" + ("; the transfer runs now" if status == "approved" else "")
    row = db.query_one("SELECT status, expires_at FROM pending_approvals WHERE id = ?", (request_id,))
    if row is None:
        return f"no approval request {request_id}; nothing released"
    if row[0] == "pending":
        return f"approval request {request_id} expired at {row[1]}; nothing released"
    return f"approval request {request_id} is already {row[0]}; nothing released"


def expire(db: "Database", now_ms: int) -> int:
    """Mark pending requests past their expiry ``expired``; returns how many."""
    db.execute("UPDATE pending_approvals SET status = 'expired', decided_at = ? WHERE status = 'pending'"
               " AND expires_at <= ?", (to_iso(now_ms), to_iso(now_ms)))
    return db.connection.changes()


def pending(db: "Database", now_ms: int) -> list[dict[str, Any]]:
    """Requests still waiting (not yet expired), oldest first; [] when the table does not exist (an old database)."""
    if not db.scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'pending_approvals'"):
        return []
    has_reason = any(column[1] == "reason" for column in db.query("PRAGMA table_info(pending_approvals)"))
    column = "reason" if has_reason else "NULL"
    rows = db.query(f"SELECT id, kind, params, amount_cents, created_at, expires_at, {column}"
                    " FROM pending_approvals WHERE status = 'pending' AND expires_at > ? ORDER BY created_at, id",
                    (to_iso(now_ms),))
    out = []
    for ident, kind, params, amount, created, expires, reason in rows:
        try:
            to = orjson.loads(params).get("to_address")
        except (orjson.JSONDecodeError, AttributeError):
            to = None
        out.append({"id": ident, "kind": kind, "amountCents": amount, "to": to, "createdAt": created,
                    "expiresAt": expires, "reason": reason})
    return out


def release_approved(db: "Database", conway: Any, config: Any, now: Clock) -> list[str]:
    """Run every approved request once through the guarded transfer path; one outcome line per request."""
    outcomes = []
    for (request_id,) in db.query("SELECT id FROM pending_approvals WHERE status = 'approved' ORDER BY decided_at, id"):
        if conway is None:
            outcomes.append(f"approval {request_id} waits: no Conway client to make the transfer")
            continue
        with db.transaction():
            db.execute("UPDATE pending_approvals SET status = 'releasing' WHERE id = ? AND status = 'approved'",
                       (request_id,))
            claimed = db.connection.changes() == 1
            row = db.query_one("SELECT kind, params FROM pending_approvals WHERE id = ?", (request_id,))
        if not claimed or row is None:
            continue
        status, text = _release(db, conway, config, now, request_id, row[0], orjson.loads(row[1]))
        db.execute("UPDATE pending_approvals SET status = ?, result = ? WHERE id = ?",
                   (status, text[:1000], request_id))
        outcomes.append(f"approval {request_id} {status}: {text}")
    return outcomes


def _release(db: "Database", conway: Any, config: Any, now: Clock, request_id: str, kind: str,
             params: dict[str, Any]) -> tuple[str, str]:
    from automaton_min.conway.client import ConwayError
    from automaton_min.treasury.money_out import TransferRefused, definitely_refused, transfer_credits, treasury_policy
    from automaton_min.treasury.spend import SpendTracker

    if kind != "transfer_credits":
        return "failed", f"unknown kind {kind!r}"
    to = str(params.get("to_address") or "").lower()
    if to in names_by_address(db) and to not in fundable_addresses(db):  # to a child, by any tool: while fundable
        return "failed", f"{to} is a child that can no longer be funded (stopped or gone); not sent"
    try:
        result = transfer_credits(db, conway, treasury_policy(config), to_address=params.get("to_address"),
                                  amount_cents=params.get("amount_cents"), note=params.get("reason"),
                                  transfers_this_turn=0, payees=known_payees(db, config), approval=request_id,
                                  spend=SpendTracker(db, now))
    except TransferRefused as exc:
        return "failed", f"transfer refused: {exc.refusal.sentence()}; not sent"
    except ConwayError as exc:
        return "failed", (f"refused by Conway: {exc}" if definitely_refused(exc)
                          else f"outcome unknown, counted as spent: {exc}")
    return "released", f"sent {result.amount_cents} cents to {result.to_address} (status {result.status})"

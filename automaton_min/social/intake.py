"""Relay messages entering the inbox: every one checked, the accepted ones stored, then the cursor saved.

README (Social relay: intake, authority, creator approvals) gives the checks in order and what a verified creator
message may decide. ``malformed`` is a missing id, a sender that is not an address, content that is not text, or a
lone surrogate in any field. A signed message is known by its canonical string's keccak, so a re-encoded signature
is still a replay. A signed message is fresh while its signed time lies within ``ACCEPT_WINDOW_MS`` before the
agent's clock and ``MAX_FUTURE_SKEW_MS`` after it; the relay's ``createdAt`` is nobody's signature and counts for
nothing. Replay keys outlive the window, so no expiry reopens one. Approval and payee commands are decided in the
intake's transaction, and the cursor is written last in it: it never moves past a message that was not stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from automaton_min.social.receive import receive
from automaton_min.chain.address import is_address
from automaton_min.clock import DAY_MS, from_iso, to_iso
from automaton_min.observe.clock_trust import ClockTrust
from automaton_min.social import approvals
from automaton_min.social.protocol import (
    MAX_CONTENT_CHARS,
    ACCEPT_WINDOW_MS,
    MAX_FUTURE_SKEW_MS,
    MAX_MESSAGE_CHARS,
    recover_send_signer,
    signed_digest,
)
from automaton_min.store.kv import get_value, set_value
from automaton_min.treasury import payees
from automaton_min.treasury.commands import out_of_order, parse_approval, parse_payee

if TYPE_CHECKING:
    from automaton_min.social.relay import PollResult
    from automaton_min.store.db import Database

CURSOR_KEY = "social_inbox_cursor"
DROPPED_KEY = "social_dropped"
DEDUP_TASK = "check_social_inbox"
REFUSED_KEY = "social_refused"
REPLAY_KEY_TTL_MS = ACCEPT_WINDOW_MS + MAX_FUTURE_SKEW_MS + DAY_MS  # longer than any message stays fresh
MAX_ID_CHARS = 200
REFUSALS_KEPT = 20
DROP_REASONS = ("malformed", "oversize", "wrong_recipient", "replay", "bad_signature", "stale", "future")
UNTIMELY = ("stale", "future")  # a genuine signer's message refused for its time: recorded, and the signer told


@dataclass(frozen=True)
class Accepted:
    id: str
    from_address: str
    signed_by: str | None
    creator: bool
    note: str | None = None  # what an approval command in the message did
    signed_at: str | None = None  # the verified signed time (None: unsigned)


@dataclass(frozen=True)
class Refused:
    """A message with a verified signature refused for its signed time (``stale`` or ``future``)."""

    id: str
    signer: str
    signed_at: str
    reason: str

    def as_dict(self, now_ms: int) -> dict[str, str]:
        return {"id": self.id, "from": self.signer, "signedAt": self.signed_at, "reason": self.reason,
                "at": to_iso(now_ms)}


@dataclass
class IntakeReport:
    stored: list[Accepted] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    cursor: str | None = None
    refused: list[Refused] = field(default_factory=list)


def authority_for(signed_by: str | None, creator_address: str | None) -> str:
    """``creator`` only for a verified signature by the configured creator; otherwise ``external``."""
    if signed_by and creator_address and signed_by.lower() == creator_address.lower():
        return "creator"
    return "external"


def ingest(db: "Database", result: "PollResult", *, self_address: str, creator_address: str | None,
           now_ms: int) -> IntakeReport:
    """Check, store and count one poll's messages, then save its cursor; all in one transaction."""
    report = IntakeReport()
    with db.transaction():
        # staleness counts from the latest time ever seen: a clock that ran ahead expired replay keys by it
        latest = max(now_ms, ClockTrust.latest_seen(db) or now_ms)
        for message in result.messages:
            verdict = _check(db, message, self_address.lower(), now_ms, latest)
            if isinstance(verdict, Refused):
                report.refused.append(verdict)
                verdict = verdict.reason
            if isinstance(verdict, str):
                report.dropped[verdict] = report.dropped.get(verdict, 0) + 1
                continue
            report.stored.append(_store(db, message, verdict, creator_address, now_ms))
        if report.dropped:
            _count_drops(db, report.dropped, now_ms)
        if report.refused:
            _record_refusals(db, report.refused, now_ms)
        _expire_keys(db, now_ms)
        if result.next_cursor and result.next_cursor != get_value(db, CURSOR_KEY):  # an idle poll writes nothing
            set_value(db, CURSOR_KEY, result.next_cursor, now_ms)
        report.cursor = result.next_cursor
    return report


def saved_cursor(db: "Database") -> str | None:
    return get_value(db, CURSOR_KEY)


def refusals(db: "Database") -> list[dict[str, str]]:
    """The latest messages refused for their signed time, newest last."""
    try:
        value = orjson.loads(get_value(db, REFUSED_KEY) or "[]")
    except orjson.JSONDecodeError:
        return []
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def dropped_counts(db: "Database") -> dict[str, int]:
    """Dropped relay messages by reason, since this database began counting."""
    try:
        value = orjson.loads(get_value(db, DROPPED_KEY) or "{}")
    except orjson.JSONDecodeError:
        return {}
    return {k: v for k, v in value.items() if isinstance(v, int)} if isinstance(value, dict) else {}


@dataclass(frozen=True)
class _Verified:
    signer: str | None
    digest: str | None
    nonce: str | None = None  # the sender's message id; unsigned, so it counts only next to a verified signer
    signed_at: str = ""


def _nonce(message: dict[str, Any]) -> str | None:
    nonce = message.get("nonce")
    return nonce if isinstance(nonce, str) and 0 < len(nonce) <= MAX_ID_CHARS else None


def _text(message: dict[str, Any], *names: str) -> str | None:
    for name in names:
        value = message.get(name)
        if isinstance(value, str):
            return value
    return None


def _check(db: "Database", message: dict[str, Any], self_address: str, now_ms: int,
           latest_ms: int) -> "_Verified | Refused | str":
    """The verified signer, or why the message is dropped (a ``Refused`` when a genuine signer's time is wrong)."""
    ident, sender, content = _text(message, "id"), _text(message, "from"), message.get("content")
    if not ident or len(ident) > MAX_ID_CHARS or not sender or not is_address(sender) or not isinstance(content, str):
        return "malformed"
    try:
        size = len(orjson.dumps(message))
    except orjson.JSONEncodeError:  # a lone surrogate is no text (or the nesting is too deep)
        return "malformed"
    if len(content) > MAX_CONTENT_CHARS or size > MAX_MESSAGE_CHARS:
        return "oversize"
    to = _text(message, "to")
    if to is not None and to.lower() != self_address:
        return "wrong_recipient"
    if _seen(db, f"social:id:{ident}") or db.scalar("SELECT 1 FROM inbox_messages WHERE id = ?", (ident,)):
        return "replay"
    signed_at = _text(message, "signedAt", "signed_at")
    signature = message.get("signature")
    verified = _Verified(None, None)
    if signature is not None:
        if not isinstance(signature, str) or signed_at is None:
            return "bad_signature"
        signer = recover_send_signer(to or self_address, content, signed_at, signature)
        if signer is None or signer != sender.lower():
            return "bad_signature"
        digest = signed_digest(to or self_address, content, signed_at)
        verified = _Verified(signer, digest, _nonce(message), signed_at)
        if _seen(db, f"social:signed:{verified.digest}") or (
                verified.nonce and _seen(db, f"social:nonce:{signer}:{verified.nonce}")):
            return "replay"
        untimely = _untimely(signed_at, now_ms, latest_ms)
        if untimely:
            return Refused(ident, signer, signed_at, untimely)
    return verified


def _untimely(signed_at: str, now_ms: int, latest_ms: int) -> str | None:
    """``stale``, ``future`` or None (fresh): the signed time against the agent's clock (and, for staleness, the
    latest time it has seen)."""
    try:
        signed = from_iso(signed_at)
    except ValueError:
        return "stale"
    if signed < latest_ms - ACCEPT_WINDOW_MS:
        return "stale"
    return "future" if signed > now_ms + MAX_FUTURE_SKEW_MS else None


def _seen(db: "Database", key: str) -> bool:
    return bool(db.scalar("SELECT 1 FROM heartbeat_dedup WHERE dedup_key = ?", (key,)))


def _remember(db: "Database", key: str, now_ms: int) -> None:
    db.execute("INSERT OR REPLACE INTO heartbeat_dedup (dedup_key, task_name, expires_at, created_at)"
               " VALUES (?, ?, ?, ?)", (key, DEDUP_TASK, to_iso(now_ms + REPLAY_KEY_TTL_MS), to_iso(now_ms)))


def _store(db: "Database", message: dict[str, Any], verified: _Verified, creator_address: str | None,
           now_ms: int) -> Accepted:
    ident, sender, content = message["id"], message["from"].lower(), message["content"]
    reply_to = _text(message, "replyTo", "reply_to")
    receive(db, ident, sender, content, now_ms=now_ms, to_address=_text(message, "to"), reply_to=reply_to,
            signed_by=verified.signer)
    _remember(db, f"social:id:{ident}", now_ms)
    if verified.digest:
        _remember(db, f"social:signed:{verified.digest}", now_ms)
    if verified.nonce:
        _remember(db, f"social:nonce:{verified.signer}:{verified.nonce}", now_ms)
    creator = authority_for(verified.signer, creator_address) == "creator"
    note = None
    if creator and (command := parse_approval(content) or parse_payee(content)):
        note = out_of_order(db, command, verified.signed_at, ident)
        if note is None and command[0] in ("approve", "reject"):
            note = approvals.decide(db, command, message_id=ident, now_ms=now_ms)
        elif note is None:
            note = payees.apply_command(db, command, message_id=ident, now_ms=now_ms)
        db.execute("UPDATE inbox_messages SET content = content || ? WHERE id = ?",
                   (f"\n[automaton-min: {note}]", ident))
    return Accepted(ident, sender, verified.signer, creator, note, verified.signed_at or None)


def _count_drops(db: "Database", dropped: dict[str, int], now_ms: int) -> None:
    totals = dropped_counts(db)
    for reason, n in dropped.items():
        totals[reason] = totals.get(reason, 0) + n
    set_value(db, DROPPED_KEY, orjson.dumps(totals).decode(), now_ms)


def _record_refusals(db: "Database", refused: list[Refused], now_ms: int) -> None:
    kept = (refusals(db) + [r.as_dict(now_ms) for r in refused])[-REFUSALS_KEPT:]
    set_value(db, REFUSED_KEY, orjson.dumps(kept).decode(), now_ms)


def _expire_keys(db: "Database", now_ms: int, batch: int = 200) -> None:
    db.execute("DELETE FROM heartbeat_dedup WHERE dedup_key IN (SELECT dedup_key FROM heartbeat_dedup"
               " WHERE task_name = ? AND expires_at < ? LIMIT ?)", (DEDUP_TASK, to_iso(now_ms), batch))

"""Messages entering the inbox: sanitized once, here (the relay's intake calls ``receive``), and stored with the raw
text beside them; nothing downstream sanitizes a message again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from automaton_min.social.injection import RateLimiter, sanitize
from automaton_min.log import get_logger
from automaton_min.store.inbox import insert_message

if TYPE_CHECKING:
    from automaton_min.store.db import Database

log = get_logger(__name__)


def receive(db: "Database", message_id: str, from_address: str, raw: str, *, now_ms: int, to_address: str | None = None,
            reply_to: str | None = None, limiter: RateLimiter | None = None, signed_by: str | None = None) -> bool:
    """Sanitize and store one incoming message; False when its id was seen before (nothing stored)."""
    cleaned = sanitize(raw, from_address, "message", now_ms=now_ms, limiter=limiter)
    if cleaned.blocked:
        log.warning("blocked an incoming message", extra={"from": from_address, "threat": cleaned.threat,
                                                          "findings": list(cleaned.findings)})
    return insert_message(db, message_id, from_address, cleaned.content, raw_content=raw, to_address=to_address,
                          reply_to=reply_to, received_at_ms=now_ms, signed_by=signed_by)

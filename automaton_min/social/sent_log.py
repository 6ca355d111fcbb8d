"""The durable record of messages turns sent (``sent_messages``): at most one send per turn and call.

README (Reliability) tells how a replayed turn sends nothing twice. A ``failed`` record (the relay said no) may be
tried again by the replay. The heartbeat's retention keeps the records 7 days.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from automaton_min.chain.address import keccak256
from automaton_min.clock import to_iso

if TYPE_CHECKING:
    from automaton_min.store.db import Database

SENDING = "sending"
SENT = "sent"
FAILED = "failed"


@dataclass(frozen=True)
class SentRecord:
    message_id: str
    to_address: str
    status: str
    relay_id: str | None

    def explain(self) -> str:
        """What a replayed call tells the model instead of sending again."""
        if self.status == SENT:
            return (f"Message already sent to {self.to_address} by this turn before a restart (id {self.relay_id});"
                    " not sent again.")
        return (f"Message not sent again: this turn handed it to the relay for {self.to_address} before a restart"
                " and the answer was lost, so it may have been delivered. Do not resend it unless asked.")


def message_id(sender: str, turn_id: str, call_index: int) -> str:
    """32 hex digits from the sender, the turn and the call's position (the shape of a relay nonce)."""
    return keccak256(f"{sender.lower()}:{turn_id}:{call_index}".encode()).hex()[:32]


def find(db: "Database", message_id: str) -> SentRecord | None:
    """The record of an earlier send with this id that was sent or may have been; None when there is none or
    the relay refused it."""
    row = db.query_one("SELECT message_id, to_address, status, relay_id FROM sent_messages"
                       " WHERE message_id = ? AND status != 'failed'", (message_id,))
    return SentRecord(*row) if row else None


def reserve(db: "Database", message_id: str, turn_id: str, to: str, content_hash: str, now_ms: int) -> None:
    """Record that the message is about to be handed to the relay (committed before the network call)."""
    with db.transaction():
        db.execute(
            "INSERT INTO sent_messages (message_id, turn_id, to_address, content_hash, status, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, 'sending', ?, ?) ON CONFLICT(message_id) DO UPDATE SET status = 'sending',"
            " content_hash = excluded.content_hash, updated_at = excluded.updated_at",
            (message_id, turn_id, to.lower(), content_hash, to_iso(now_ms), to_iso(now_ms)))


def settle(db: "Database", message_id: str, status: str, now_ms: int, relay_id: str | None = None) -> None:
    """Record the relay's answer: ``sent`` with its id, or ``failed``."""
    with db.transaction():
        db.execute("UPDATE sent_messages SET status = ?, relay_id = ?, updated_at = ? WHERE message_id = ?",
                   (status, relay_id, to_iso(now_ms), message_id))


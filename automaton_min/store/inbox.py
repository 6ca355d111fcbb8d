"""The inbox (``inbox_messages``, README: The agent): messages from the relay and the creator, each handled once.

Every change is one guarded ``UPDATE`` of rows in the expected state, so two connections never claim or settle the
same row. Claims also require ``processed_at IS NULL`` (rows an older reference processed before its ``status``
column read ``received``), which the reference's index ``idx_inbox_unprocessed`` serves. Id lists travel as one JSON
parameter (``json_each``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from automaton_min.clock import to_iso

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database

RECEIVED = "received"
IN_PROGRESS = "in_progress"
PROCESSED = "processed"
FAILED = "failed"
STATUSES = (RECEIVED, IN_PROGRESS, PROCESSED, FAILED)

DEFAULT_MAX_RETRIES = 3
POISON_CRASHES = 5
CLAIM_BATCH = 10

# The selection a claim marks: served by the partial index idx_inbox_unprocessed.
CLAIMABLE = "processed_at IS NULL AND status = 'received' AND retry_count < max_retries"
CLAIMABLE_SQL = f"SELECT id FROM inbox_messages WHERE {CLAIMABLE} ORDER BY received_at, id LIMIT ?"
SIGNED_CLAIMABLE_SQL = (f"SELECT id FROM inbox_messages WHERE {CLAIMABLE} AND signed_by = ?"
                        " ORDER BY received_at, id LIMIT ?")

_COLUMNS = ("id, from_address, content, raw_content, to_address, reply_to, received_at, processed_at,"
            " status, retry_count, max_retries, signed_by")


@dataclass(frozen=True)
class InboxMessage:
    id: str
    from_address: str
    content: str
    raw_content: str | None
    to_address: str | None
    reply_to: str | None
    received_at: str
    processed_at: str | None
    status: str
    retry_count: int
    max_retries: int
    signed_by: str | None = None  # the verified relay signer (lowercase); None: the message carried no signature


def _message(row: tuple) -> InboxMessage:
    (id_, from_address, content, raw_content, to_address, reply_to, received_at, processed_at,
     status, retry_count, max_retries, signed_by) = row
    return InboxMessage(id_, from_address, content, raw_content, to_address, reply_to, received_at, processed_at,
                        status or RECEIVED, int(retry_count or 0),
                        DEFAULT_MAX_RETRIES if max_retries is None else int(max_retries), signed_by)


def _ids_param(ids: Iterable[str]) -> str:
    return orjson.dumps(list(dict.fromkeys(ids))).decode()


def insert_message(db: "Database", id: str, from_address: str, content: str, *, raw_content: str | None = None,
                   to_address: str | None = None, reply_to: str | None = None, received_at_ms: int,
                   signed_by: str | None = None) -> bool:
    """Store a new message as ``received``; False (nothing written) when its id is there. ``signed_by``: the signer
    verified at intake (lowercase), never a claimed sender."""
    db.execute(
        "INSERT INTO inbox_messages (id, from_address, content, raw_content, to_address, reply_to, received_at,"
        " status, retry_count, max_retries, signed_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)"
        " ON CONFLICT(id) DO NOTHING",
        (id, from_address, content, raw_content, to_address, reply_to, to_iso(received_at_ms), RECEIVED,
         DEFAULT_MAX_RETRIES, signed_by),
    )
    return db.connection.changes() > 0


def claim(db: "Database", limit: int = CLAIM_BATCH, *, now_ms: int,
          signed_by: str | None = None) -> list[InboxMessage]:
    """Take up to ``limit`` claimable messages (with ``signed_by``, only those that signer signed), oldest first, as
    ``in_progress`` with the incremented ``retry_count`` (one ``UPDATE ... RETURNING``, so no connection can split
    them). ``now_ms`` only fits the loop's hook."""
    if limit <= 0:
        return []
    chosen, params = (SIGNED_CLAIMABLE_SQL, (signed_by.lower(), limit)) if signed_by else (CLAIMABLE_SQL, (limit,))
    with db.transaction():
        rows = db.query(
            "UPDATE inbox_messages SET status = 'in_progress', retry_count = retry_count + 1"
            f" WHERE id IN ({chosen})"
            " AND status = 'received' AND processed_at IS NULL"
            f" RETURNING {_COLUMNS}",
            params,
        )
    messages = [_message(row) for row in rows]
    messages.sort(key=lambda m: (m.received_at, m.id))  # RETURNING has no defined order
    return messages


def mark_processed(db: "Database", ids: Iterable[str], now_ms: int) -> int:
    """Mark ``in_progress`` messages ``processed`` (never twice); how many changed. No transaction of its own: it
    commits with the turn's."""
    param = _ids_param(ids)
    if param == "[]":
        return 0
    db.execute(
        "UPDATE inbox_messages SET status = 'processed', processed_at = ?"
        " WHERE id IN (SELECT value FROM json_each(?)) AND status = 'in_progress'",
        (to_iso(now_ms), param),
    )
    return db.connection.changes()


def mark_taken(db: "Database", id: str, now_ms: int) -> bool:
    """A message the runtime acted on itself (a child's task report): processed without a turn reading it."""
    db.execute("UPDATE inbox_messages SET status = 'processed', processed_at = ? WHERE id = ? AND status = 'received'",
               (to_iso(now_ms), id))
    return db.connection.changes() == 1


_RELEASE = (
    "UPDATE inbox_messages SET status = CASE WHEN retry_count >= max_retries THEN 'failed' ELSE 'received' END"
    " WHERE status = 'in_progress'"
)


def release_after_failed_turn(db: "Database", ids: Iterable[str]) -> tuple[int, int]:
    """After a failed turn, its ``in_progress`` messages go back to ``received`` (``failed`` when out of retries);
    returns ``(released, failed)``."""
    param = _ids_param(ids)
    if param == "[]":
        return (0, 0)
    with db.transaction():
        rows = db.query(_RELEASE + " AND id IN (SELECT value FROM json_each(?)) RETURNING status", (param,))
    failed = sum(1 for (status,) in rows if status == FAILED)
    return (len(rows) - failed, failed)


def return_unread(db: "Database", ids: Iterable[str]) -> int:
    """Put claimed messages back as ``received``, the try not counted (a budget refused the turn); how many."""
    param = _ids_param(ids)
    if param == "[]":
        return 0
    with db.transaction():
        db.execute(
            "UPDATE inbox_messages SET status = 'received', retry_count = MAX(retry_count - 1, 0)"
            " WHERE id IN (SELECT value FROM json_each(?)) AND status = 'in_progress'",
            (param,),
        )
        return db.connection.changes()


def return_in_flight(db: "Database") -> int:
    """Put back every ``in_progress`` row, no try or crash counted (a turn not written: a full disk); how many.
    Only when no turn is under way."""
    with db.transaction():
        rows = db.query("UPDATE inbox_messages SET status = 'received', retry_count = MAX(retry_count - 1, 0)"
                        " WHERE status = 'in_progress' RETURNING id")
    return len(rows)


def reclaim_stale(db: "Database") -> int:
    """Put back every row a crash left ``in_progress``, the try given back (``failed`` at ``POISON_CRASHES``
    crashes); how many. Once at start, before the loop claims anything."""
    with db.transaction():
        rows = db.query(
            "UPDATE inbox_messages SET retry_count = MAX(retry_count - 1, 0), crash_count = crash_count + 1,"
            " status = CASE WHEN crash_count + 1 >= ? THEN 'failed' ELSE 'received' END"
            " WHERE status = 'in_progress' RETURNING id", (POISON_CRASHES,))
    return len(rows)


def waiting(db: "Database") -> bool:
    """Whether any message waits to be claimed."""
    return db.scalar(f"SELECT 1 FROM inbox_messages WHERE {CLAIMABLE} LIMIT 1") is not None


def get_message(db: "Database", id: str) -> InboxMessage | None:
    """One message by id, or ``None``."""
    row = db.query_one(f"SELECT {_COLUMNS} FROM inbox_messages WHERE id = ?", (id,))
    return None if row is None else _message(row)


def prune_processed(db: "Database", older_than_ms: int) -> int:
    """Delete ``processed`` and ``failed`` rows (and any with ``processed_at``: an older reference's) older than the
    cutoff by ``processed_at``, else ``received_at``; how many. Rows still to handle are never deleted."""
    db.execute(
        "DELETE FROM inbox_messages WHERE (status IN ('processed', 'failed') OR processed_at IS NOT NULL)"
        " AND status != 'in_progress' AND COALESCE(processed_at, received_at) < ?",
        (to_iso(older_than_ms),),
    )
    return db.connection.changes()

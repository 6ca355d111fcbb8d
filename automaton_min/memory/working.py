"""Working memory (``working_memory``): short-lived notes of a session (goals, plans, observations) with a
priority in 0..1 and an optional expiry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from automaton_min.clock import Clock, to_iso
from automaton_min.ids import new_ulid
from automaton_min.memory.common import (
    MemoryStoreError,
    Ranked,
    choice,
    delete_where,
    estimate_tokens,
    prune_to,
    ranked_search,
    text,
    unit,
)

if TYPE_CHECKING:
    from automaton_min.store.db import Database

CONTENT_TYPES = ("goal", "observation", "plan", "reflection", "task", "decision", "note", "summary")
_COLUMNS = ("t.id, t.session_id, t.content, t.content_type, t.priority, t.token_count, t.expires_at, t.source_turn,"
            " t.created_at")


@dataclass(frozen=True)
class WorkingEntry:
    id: str
    session_id: str
    content: str
    content_type: str
    priority: float
    token_count: int
    expires_at: str | None
    source_turn: str | None
    created_at: str


class WorkingMemory:
    """Create, read, update, search and expire working-memory entries.

    Bounds: at most ``per_session`` live entries a session (the lowest priority, then oldest, go first) and
    ``max_rows`` in all; expired entries are removed by ``clear_expired`` and never returned.
    """

    HALF_LIFE_DAYS = 1.0

    def __init__(self, db: "Database", now: Clock, *, count_tokens: Callable[[str], int] = estimate_tokens,
                 per_session: int = 20, max_rows: int = 2_000) -> None:
        self.db, self.now, self.count_tokens = db, now, count_tokens
        self.per_session, self.max_rows = per_session, max_rows

    def add(self, session_id: str, content: str, *, content_type: str = "note", priority: float = 0.5,
            ttl_ms: int | None = None, source_turn: str | None = None) -> WorkingEntry:
        """Store an entry; ``ttl_ms`` makes it expire that long from now."""
        text("session_id", session_id, limit=200)
        text("content", content)
        choice("content_type", content_type, CONTENT_TYPES)
        unit("priority", priority)
        if ttl_ms is not None and ttl_ms <= 0:
            raise MemoryStoreError(f"ttl_ms: must be positive, got {ttl_ms}")
        now = self.now()
        entry_id = new_ulid(now)
        expires = to_iso(now + ttl_ms) if ttl_ms is not None else None
        self.db.execute(
            "INSERT INTO working_memory (id, session_id, content, content_type, priority, token_count, expires_at,"
            " source_turn, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (entry_id, session_id, content, content_type, float(priority), self.count_tokens(content), expires,
             source_turn, to_iso(now)),
        )
        return self.get(entry_id)  # type: ignore[return-value]

    def get(self, entry_id: str) -> WorkingEntry | None:
        row = self.db.query_one(f"SELECT {_COLUMNS} FROM working_memory t WHERE t.id = ?", (entry_id,))
        return WorkingEntry(*row) if row else None

    def update(self, entry_id: str, *, content: str | None = None, content_type: str | None = None,
               priority: float | None = None, ttl_ms: int | None = None) -> WorkingEntry:
        """Change the given fields; ``ttl_ms`` restarts the expiry from now."""
        entry = self.get(entry_id)
        if entry is None:
            raise MemoryStoreError(f"working memory {entry_id!r}: not found")
        if content is not None:
            text("content", content)
        if content_type is not None:
            choice("content_type", content_type, CONTENT_TYPES)
        if priority is not None:
            unit("priority", priority)
        if ttl_ms is not None and ttl_ms <= 0:
            raise MemoryStoreError(f"ttl_ms: must be positive, got {ttl_ms}")
        new_content = entry.content if content is None else content
        self.db.execute(
            "UPDATE working_memory SET content = ?, content_type = ?, priority = ?, token_count = ?, expires_at = ?"
            " WHERE id = ?",
            (new_content, content_type or entry.content_type,
             entry.priority if priority is None else float(priority), self.count_tokens(new_content),
             entry.expires_at if ttl_ms is None else to_iso(self.now() + ttl_ms), entry_id),
        )
        return self.get(entry_id)  # type: ignore[return-value]

    def delete(self, entry_id: str) -> bool:
        self.db.execute("DELETE FROM working_memory WHERE id = ?", (entry_id,))
        return self.db.connection.changes() > 0

    def session(self, session_id: str) -> list[WorkingEntry]:
        """The session's live entries, highest priority first, then newest."""
        rows = self.db.query(
            f"SELECT {_COLUMNS} FROM working_memory t WHERE t.session_id = ? AND {self._live()}"
            " ORDER BY t.priority DESC, t.created_at DESC",
            (session_id, to_iso(self.now())),
        )
        return [WorkingEntry(*r) for r in rows]

    def search(self, query: str, *, session_id: str | None = None, limit: int = 10) -> list[Ranked[WorkingEntry]]:
        """Live entries matching ``query``, ranked (quality = priority, half-life 1 day)."""
        where, params = self._live(), [to_iso(self.now())]
        if session_id is not None:
            where += " AND t.session_id = ?"
            params.append(session_id)
        return ranked_search(
            self.db, table="working_memory", select=_COLUMNS, query=query, weights=(1.0,), limit=limit,
            now_ms=self.now(), half_life_days=self.HALF_LIFE_DAYS, build=lambda r: WorkingEntry(*r),
            quality=lambda e: e.priority, stamp=lambda e: e.created_at, where=where, params=params,
        )

    def clear_expired(self) -> int:
        """Delete every expired entry (in small batches); returns how many."""
        return delete_where(self.db, "working_memory", "expires_at IS NOT NULL AND expires_at <= ?",
                            (to_iso(self.now()),))

    def prune(self, session_id: str | None = None) -> int:
        """Expire, then keep the ``per_session`` best of ``session_id`` (if given) and ``max_rows`` in all."""
        deleted = self.clear_expired()
        order = "priority ASC, created_at ASC"
        if session_id is not None:
            deleted += prune_to(self.db, "working_memory", keep=self.per_session, order=order,
                                scope="session_id = ?", scope_params=(session_id,))
        return deleted + prune_to(self.db, "working_memory", keep=self.max_rows, order=order)

    @staticmethod
    def _live() -> str:
        return "(t.expires_at IS NULL OR t.expires_at > ?)"

"""Episodic memory (``episodic_memory``): significant events with an importance in 0..1, and session summaries
(``session_summaries``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from automaton_min.clock import Clock, to_iso
from automaton_min.ids import new_ulid
from automaton_min.memory.common import (
    MemoryStoreError,
    Ranked,
    choice,
    estimate_tokens,
    prune_to,
    ranked_search,
    text,
    unit,
)

if TYPE_CHECKING:
    from automaton_min.store.db import Database

OUTCOMES = ("success", "failure", "partial", "neutral")
CLASSIFICATIONS = ("strategic", "productive", "communication", "maintenance", "idle", "error")
_COLUMNS = ("t.id, t.session_id, t.event_type, t.summary, t.detail, t.outcome, t.importance, t.token_count,"
            " t.accessed_count, t.last_accessed_at, t.classification, t.created_at")
_SUMMARY_COLUMNS = ("t.id, t.session_id, t.summary, t.key_decisions, t.tools_used, t.outcomes, t.turn_count,"
                    " t.total_tokens, t.total_cost_cents, t.created_at")
# An importance point is worth this many days of age when retention chooses what to drop.
RETENTION_DAYS_PER_IMPORTANCE = 90.0


@dataclass(frozen=True)
class Episode:
    id: str
    session_id: str
    event_type: str
    summary: str
    detail: str | None
    outcome: str | None
    importance: float
    token_count: int
    accessed_count: int
    last_accessed_at: str | None
    classification: str
    created_at: str


@dataclass(frozen=True)
class SessionSummary:
    id: str
    session_id: str
    summary: str
    key_decisions: list
    tools_used: list
    outcomes: list
    turn_count: int
    total_tokens: int
    total_cost_cents: int
    created_at: str


def _json_list(raw: str | None) -> list:
    try:
        value = json.loads(raw or "[]")
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _summary(row: tuple) -> SessionSummary:
    return SessionSummary(row[0], row[1], row[2], _json_list(row[3]), _json_list(row[4]), _json_list(row[5]),
                          *row[6:])


class EpisodicMemory:
    """Record, read, update, search and prune episodes; save and search session summaries.

    Retention keeps at most ``max_rows`` episodes, dropping the lowest ``importance - age_days / 90`` first
    (an important episode outlives an unimportant one by 90 days per importance point), and at most
    ``max_summaries`` session summaries (oldest first).
    """

    HALF_LIFE_DAYS = 30.0

    def __init__(self, db: "Database", now: Clock, *, count_tokens: Callable[[str], int] = estimate_tokens,
                 max_rows: int = 10_000, max_summaries: int = 1_000) -> None:
        self.db, self.now, self.count_tokens = db, now, count_tokens
        self.max_rows, self.max_summaries = max_rows, max_summaries

    def record(self, session_id: str, event_type: str, summary: str, *, detail: str | None = None,
               outcome: str | None = None, importance: float = 0.5,
               classification: str = "maintenance") -> Episode:
        text("session_id", session_id, limit=200)
        text("event_type", event_type, limit=200)
        text("summary", summary)
        text("detail", detail, required=False)
        if outcome is not None:
            choice("outcome", outcome, OUTCOMES)
        unit("importance", importance)
        choice("classification", classification, CLASSIFICATIONS)
        now = self.now()
        episode_id = new_ulid(now)
        self.db.execute(
            "INSERT INTO episodic_memory (id, session_id, event_type, summary, detail, outcome, importance,"
            " token_count, classification, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (episode_id, session_id, event_type, summary, detail, outcome, float(importance),
             self.count_tokens(summary + (detail or "")), classification, to_iso(now)),
        )
        return self.get(episode_id)  # type: ignore[return-value]

    def get(self, episode_id: str) -> Episode | None:
        row = self.db.query_one(f"SELECT {_COLUMNS} FROM episodic_memory t WHERE t.id = ?", (episode_id,))
        return Episode(*row) if row else None

    def update(self, episode_id: str, *, summary: str | None = None, detail: str | None = None,
               outcome: str | None = None, importance: float | None = None) -> Episode:
        episode = self.get(episode_id)
        if episode is None:
            raise MemoryStoreError(f"episode {episode_id!r}: not found")
        if summary is not None:
            text("summary", summary)
        text("detail", detail, required=False)
        if outcome is not None:
            choice("outcome", outcome, OUTCOMES)
        if importance is not None:
            unit("importance", importance)
        new_summary = episode.summary if summary is None else summary
        new_detail = episode.detail if detail is None else detail
        self.db.execute(
            "UPDATE episodic_memory SET summary = ?, detail = ?, outcome = ?, importance = ?, token_count = ?"
            " WHERE id = ?",
            (new_summary, new_detail, outcome or episode.outcome,
             episode.importance if importance is None else float(importance),
             self.count_tokens(new_summary + (new_detail or "")), episode_id),
        )
        return self.get(episode_id)  # type: ignore[return-value]

    def delete(self, episode_id: str) -> bool:
        self.db.execute("DELETE FROM episodic_memory WHERE id = ?", (episode_id,))
        return self.db.connection.changes() > 0

    def recent(self, *, session_id: str | None = None, limit: int = 10) -> list[Episode]:
        """The newest episodes (of one session, if given)."""
        where, params = ("t.session_id = ?", [session_id]) if session_id is not None else ("1", [])
        rows = self.db.query(
            f"SELECT {_COLUMNS} FROM episodic_memory t WHERE {where}"
            " ORDER BY t.created_at DESC, t.rowid DESC LIMIT ?",
            (*params, limit),
        )
        return [Episode(*r) for r in rows]

    def search(self, query: str, *, session_id: str | None = None, limit: int = 10) -> list[Ranked[Episode]]:
        """Episodes matching ``query``, ranked (quality = importance, half-life 30 days; summary weighs most)."""
        where, params = ("t.session_id = ?", [session_id]) if session_id is not None else ("", [])
        return ranked_search(
            self.db, table="episodic_memory", select=_COLUMNS, query=query, weights=(0.5, 2.0, 1.0), limit=limit,
            now_ms=self.now(), half_life_days=self.HALF_LIFE_DAYS, build=lambda r: Episode(*r),
            quality=lambda e: e.importance, stamp=lambda e: e.created_at, where=where, params=params,
        )

    def mark_accessed(self, episode_ids: Sequence[str]) -> None:
        """Count a use of each episode (retrieval into a context)."""
        stamp = to_iso(self.now())
        with self.db.transaction():
            for episode_id in episode_ids:
                self.db.execute(
                    "UPDATE episodic_memory SET accessed_count = accessed_count + 1, last_accessed_at = ? WHERE id = ?",
                    (stamp, episode_id),
                )

    def prune(self) -> int:
        """Keep the ``max_rows`` episodes with the highest importance-for-their-age, and ``max_summaries``."""
        now_jd = f"julianday('{to_iso(self.now())}')"
        order = f"importance - ({now_jd} - julianday(created_at)) / {RETENTION_DAYS_PER_IMPORTANCE} ASC, created_at ASC"
        deleted = prune_to(self.db, "episodic_memory", keep=self.max_rows, order=order)
        return deleted + prune_to(self.db, "session_summaries", keep=self.max_summaries, order="created_at ASC")

    # --- session summaries ---

    def save_summary(self, session_id: str, summary: str, *, key_decisions: Sequence[str] = (),
                     tools_used: Sequence[str] = (), outcomes: Sequence[str] = (), turn_count: int = 0,
                     total_tokens: int = 0, total_cost_cents: int = 0) -> SessionSummary:
        """Create or replace the summary of ``session_id`` (one per session)."""
        text("session_id", session_id, limit=200)
        text("summary", summary)
        for name, value in (("turn_count", turn_count), ("total_tokens", total_tokens),
                            ("total_cost_cents", total_cost_cents)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise MemoryStoreError(f"{name}: expected a whole number 0 or more, got {value!r}")
        lists = [json.dumps([str(x) for x in v]) for v in (key_decisions, tools_used, outcomes)]
        text("key_decisions", lists[0])
        now = self.now()
        self.db.execute(
            "INSERT INTO session_summaries (id, session_id, summary, key_decisions, tools_used, outcomes, turn_count,"
            " total_tokens, total_cost_cents, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (session_id) DO UPDATE SET summary = excluded.summary,"
            " key_decisions = excluded.key_decisions, tools_used = excluded.tools_used, outcomes = excluded.outcomes, turn_count = excluded.turn_count,"
            " total_tokens = excluded.total_tokens, total_cost_cents = excluded.total_cost_cents,"
            " created_at = excluded.created_at",
            (new_ulid(now), session_id, summary, *lists, turn_count, total_tokens, total_cost_cents, to_iso(now)),
        )
        return self.summary_of(session_id)  # type: ignore[return-value]

    def summary_of(self, session_id: str) -> SessionSummary | None:
        row = self.db.query_one(f"SELECT {_SUMMARY_COLUMNS} FROM session_summaries t WHERE t.session_id = ?",
                                (session_id,))
        return _summary(row) if row else None

    def delete_summary(self, session_id: str) -> bool:
        self.db.execute("DELETE FROM session_summaries WHERE session_id = ?", (session_id,))
        return self.db.connection.changes() > 0

    def search_summaries(self, query: str, *, limit: int = 5) -> list[Ranked[SessionSummary]]:
        """Session summaries matching ``query``, ranked (quality 0.5 for all, half-life 30 days)."""
        return ranked_search(
            self.db, table="session_summaries", select=_SUMMARY_COLUMNS, query=query, weights=(1.0, 1.0),
            limit=limit, now_ms=self.now(), half_life_days=self.HALF_LIFE_DAYS, build=_summary,
            quality=lambda s: 0.5, stamp=lambda s: s.created_at,
        )

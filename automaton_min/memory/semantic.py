"""Semantic memory (``semantic_memory``): facts as category / key / value with a confidence in 0..1.

The categories are the reference's: self, environment, financial, agent, domain, procedural_ref, creator. (The
memory document's subject-predicate-object maps onto ``key`` = subject and predicate, ``value`` = object.)

Creator protection: a fact whose ``source`` is ``creator`` (the creator said it) or whose category is
``creator`` (it is about the creator) cannot be forgotten, pruned, or changed by any other source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from automaton_min.clock import Clock, to_iso
from automaton_min.ids import new_ulid
from automaton_min.memory.common import (
    MemoryStoreError,
    ProtectedMemoryError,
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

CATEGORIES = ("self", "environment", "financial", "agent", "domain", "procedural_ref", "creator")
CREATOR_SOURCE = "creator"
PROTECTED_SQL = f"(category = 'creator' OR source = '{CREATOR_SOURCE}')"
_COLUMNS = "t.id, t.category, t.key, t.value, t.confidence, t.source, t.last_verified_at, t.created_at, t.updated_at"


@dataclass(frozen=True)
class Fact:
    id: str
    category: str
    key: str
    value: str
    confidence: float
    source: str
    last_verified_at: str | None
    created_at: str
    updated_at: str

    @property
    def protected(self) -> bool:
        return self.category == "creator" or self.source == CREATOR_SOURCE

    @property
    def token_text(self) -> str:
        return f"{self.category}/{self.key}: {self.value}"


class SemanticMemory:
    """Remember, read, update, search, forget and prune facts.

    Bound: at most ``max_rows`` facts; retention drops unprotected facts with the lowest confidence, least
    recently updated first.
    """

    HALF_LIFE_DAYS = 90.0

    def __init__(self, db: "Database", now: Clock, *, count_tokens: Callable[[str], int] = estimate_tokens,
                 max_rows: int = 2_000) -> None:
        self.db, self.now, self.count_tokens, self.max_rows = db, now, count_tokens, max_rows

    def remember(self, category: str, key: str, value: str, *, source: str, confidence: float = 1.0) -> Fact:
        """Store a fact, or update the one with the same category and key (its id is kept).

        A protected fact is changed only by the creator's source.
        """
        choice("category", category, CATEGORIES)
        text("key", key, limit=200)
        text("value", value)
        text("source", source, limit=200)
        unit("confidence", confidence)
        now = to_iso(self.now())
        with self.db.transaction():
            existing = self.get_by_key(category, key)
            if existing is None:
                fact_id = new_ulid(self.now())
                self.db.execute(
                    "INSERT INTO semantic_memory (id, category, key, value, confidence, source, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (fact_id, category, key, value, float(confidence), source, now, now),
                )
            else:
                fact_id = existing.id
                self._check_may_change(existing, source)
                self.db.execute(
                    "UPDATE semantic_memory SET value = ?, confidence = ?, source = ?, updated_at = ? WHERE id = ?",
                    (value, float(confidence), source, now, fact_id),
                )
        return self.get(fact_id)  # type: ignore[return-value]

    def get(self, fact_id: str) -> Fact | None:
        row = self.db.query_one(f"SELECT {_COLUMNS} FROM semantic_memory t WHERE t.id = ?", (fact_id,))
        return Fact(*row) if row else None

    def get_by_key(self, category: str, key: str) -> Fact | None:
        row = self.db.query_one(f"SELECT {_COLUMNS} FROM semantic_memory t WHERE t.category = ? AND t.key = ?",
                                (category, key))
        return Fact(*row) if row else None

    def update(self, fact_id: str, *, source: str, value: str | None = None,
               confidence: float | None = None) -> Fact:
        """Change a fact's value or confidence on behalf of ``source``."""
        fact = self.get(fact_id)
        if fact is None:
            raise MemoryStoreError(f"fact {fact_id!r}: not found")
        return self.remember(fact.category, fact.key, fact.value if value is None else value, source=source,
                             confidence=fact.confidence if confidence is None else confidence)

    def verify(self, fact_id: str) -> None:
        """Record that the fact was checked and still holds."""
        self.db.execute("UPDATE semantic_memory SET last_verified_at = ? WHERE id = ?", (to_iso(self.now()), fact_id))

    def forget(self, fact_id: str) -> bool:
        """Delete a fact; a protected fact raises ``ProtectedMemoryError``. False when there was none."""
        fact = self.get(fact_id)
        if fact is None:
            return False
        if fact.protected:
            raise ProtectedMemoryError(f"fact {fact.category}/{fact.key} came from the creator and cannot be forgotten")
        self.db.execute(f"DELETE FROM semantic_memory WHERE id = ? AND NOT {PROTECTED_SQL}", (fact_id,))
        return self.db.connection.changes() > 0

    delete = forget

    def by_category(self, category: str, *, limit: int = 50) -> list[Fact]:
        """A category's facts, most confident first, then most recently updated."""
        choice("category", category, CATEGORIES)
        rows = self.db.query(
            f"SELECT {_COLUMNS} FROM semantic_memory t WHERE t.category = ?"
            " ORDER BY t.confidence DESC, t.updated_at DESC LIMIT ?",
            (category, limit),
        )
        return [Fact(*r) for r in rows]

    def search(self, query: str, *, category: str | None = None, min_confidence: float = 0.0,
               limit: int = 10) -> list[Ranked[Fact]]:
        """Facts matching ``query``, ranked (quality = confidence, half-life 90 days of ``updated_at``)."""
        unit("min_confidence", min_confidence)
        where, params = "t.confidence >= ?", [min_confidence]
        if category is not None:
            choice("category", category, CATEGORIES)
            where += " AND t.category = ?"
            params.append(category)
        return ranked_search(
            self.db, table="semantic_memory", select=_COLUMNS, query=query, weights=(0.5, 2.0, 1.0), limit=limit,
            now_ms=self.now(), half_life_days=self.HALF_LIFE_DAYS, build=lambda r: Fact(*r),
            quality=lambda f: f.confidence, stamp=lambda f: f.updated_at, where=where, params=params,
        )

    def prune(self) -> int:
        """Keep at most ``max_rows`` facts; protected ones are never dropped."""
        return prune_to(self.db, "semantic_memory", keep=self.max_rows, order="confidence ASC, updated_at ASC",
                        deletable=f"NOT {PROTECTED_SQL}")

    @staticmethod
    def _check_may_change(fact: Fact, source: str) -> None:
        if fact.protected and source != CREATOR_SOURCE:
            raise ProtectedMemoryError(
                f"fact {fact.category}/{fact.key} came from the creator; only the creator can change it"
            )

"""The six memory stores (README: Memory), each a ``Table`` over ``MemoryStore`` plus the few methods only it has.

0x addresses are stored lowercase and matched without regard to case (a reference row keeps its spelling).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from automaton_min.clock import Clock, to_iso
from automaton_min.ids import new_ulid
from automaton_min.memory.common import (MAX_TEXT, MemoryStoreError, ProtectedMemoryError, estimate_tokens, one_of,
                                         text, unit)
from automaton_min.memory.store import MemoryStore, Table, delete_where, json_list, prune_to

if TYPE_CHECKING:
    from automaton_min.store.db import Database

CONTENT_TYPES = ("goal", "observation", "plan", "reflection", "task", "decision", "note", "summary")
OUTCOMES = ("success", "failure", "partial", "neutral")
CLASSIFICATIONS = ("strategic", "productive", "communication", "maintenance", "idle", "error")
CATEGORIES = ("self", "environment", "financial", "agent", "domain", "procedural_ref", "creator")
# The memory document's relationship types, and the two the reference's ingestion writes.
RELATIONSHIP_TYPES = ("creator", "child", "parent", "peer", "client", "service_provider", "contacted", "messaged_us")
CREATOR_SOURCE = "creator"
EXTERNAL_SOURCE = "external"  # a fact written in a turn that answered an outside message
MAX_STEPS = 50
# An importance point is worth this many days of age when retention chooses which episode to drop.
RETENTION_DAYS_PER_IMPORTANCE = 90.0
_HEX_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_SESSION = text(200)


def _count(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise MemoryStoreError(f"{name}: expected a whole number 0 or more, got {value!r}")
    return value


# --- working memory -----------------------------------------------------------------------------------------


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


class WorkingMemory(MemoryStore):
    """A session's short-lived notes with a priority and an optional expiry (expired: never listed or found). Bounds:
    ``per_session`` live entries a session, ``max_rows`` in all; the lowest priority, then oldest, go first."""

    TABLE = Table(
        "working_memory", WorkingEntry, weights=(1.0,), half_life_days=1.0, quality=lambda e: e.priority,
        stamp=lambda e: e.created_at, prune_order="priority ASC, created_at ASC", max_rows=2_000,
        checks={"session_id": _SESSION, "content": text(), "content_type": one_of(CONTENT_TYPES), "priority": unit},
        filters={"session_id": "t.session_id = ?"}, live="t.expires_at IS NULL OR t.expires_at > ?",
    )

    def __init__(self, db: "Database", now: Clock, *, per_session: int = 20, max_rows: int | None = None) -> None:
        super().__init__(db, now, max_rows=max_rows)
        self.per_session = per_session

    def add(self, session_id: str, content: str, *, content_type: str = "note", priority: float = 0.5,
            ttl_ms: int | None = None, source_turn: str | None = None) -> WorkingEntry:
        """Store an entry; ``ttl_ms`` makes it expire that long from now."""
        if ttl_ms is not None and ttl_ms <= 0:
            raise MemoryStoreError(f"ttl_ms: must be positive, got {ttl_ms}")
        now = self.now()
        entry_id = new_ulid(now)
        values = self._checked({"id": entry_id, "session_id": session_id, "content": content,
                                "content_type": content_type, "priority": priority, "source_turn": source_turn,
                                "expires_at": to_iso(now + ttl_ms) if ttl_ms is not None else None,
                                "created_at": to_iso(now)})
        self._insert({**values, "token_count": estimate_tokens(content)})
        return self.get(entry_id)

    def session(self, session_id: str) -> list[WorkingEntry]:
        """The session's live entries, highest priority first, then newest."""
        return self._select("t.session_id = ?", (session_id,), order="t.priority DESC, t.created_at DESC", live=True)

    def clear_expired(self) -> int:
        """Delete every expired entry (in small batches); returns how many."""
        return delete_where(self.db, "working_memory", "expires_at IS NOT NULL AND expires_at <= ?",
                            (to_iso(self.now()),))

    def prune(self, session_id: str | None = None) -> int:
        """Expire, then keep the ``per_session`` best of ``session_id`` (if given) and ``max_rows`` in all."""
        deleted = self.clear_expired()
        if session_id is not None:
            deleted += prune_to(self.db, "working_memory", keep=self.per_session, order=self.TABLE.prune_order,
                                scope="session_id = ?", scope_params=(session_id,))
        return deleted + super().prune()


# --- episodes and session summaries -------------------------------------------------------------------------


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


class EpisodicMemory(MemoryStore):
    """Significant events with an importance in 0..1. Retention keeps the ``max_rows`` highest of
    ``importance - age_days / 90`` (an important episode outlives an unimportant one by 90 days a point)."""

    TABLE = Table(
        "episodic_memory", Episode, weights=(0.5, 2.0, 1.0), half_life_days=30.0, quality=lambda e: e.importance,
        stamp=lambda e: e.created_at, max_rows=10_000,
        prune_order=f"importance - (julianday(?) - julianday(created_at)) / {RETENTION_DAYS_PER_IMPORTANCE} ASC,"
                    " created_at ASC",
        checks={"session_id": _SESSION, "event_type": text(200), "summary": text(), "detail": text(required=False),
                "outcome": one_of(OUTCOMES, optional=True), "importance": unit,
                "classification": one_of(CLASSIFICATIONS)},
        filters={"session_id": "t.session_id = ?"},
    )

    def record(self, session_id: str, event_type: str, summary: str, *, detail: str | None = None,
               outcome: str | None = None, importance: float = 0.5, classification: str = "maintenance") -> Episode:
        now = self.now()
        entry_id = new_ulid(now)
        self._insert({"id": entry_id, "session_id": session_id, "event_type": event_type, "summary": summary,
                      "detail": detail, "outcome": outcome, "importance": importance,
                      "token_count": estimate_tokens(f"{summary}{detail or ''}"), "classification": classification,
                      "created_at": to_iso(now)})
        return self.get(entry_id)

    def recent(self, *, session_id: str | None = None, limit: int = 10) -> list[Episode]:
        """The newest episodes (of one session, if given)."""
        where, params = ("t.session_id = ?", (session_id,)) if session_id is not None else ("1", ())
        return self._select(where, params, order="t.created_at DESC, t.rowid DESC", limit=limit)

    def mark_accessed(self, episode_ids: Sequence[str]) -> None:
        """Count a use of each episode (retrieval into a context)."""
        stamp = to_iso(self.now())
        with self.db.transaction():
            for episode_id in episode_ids:
                self.db.execute("UPDATE episodic_memory SET accessed_count = accessed_count + 1,"
                                " last_accessed_at = ? WHERE id = ?", (stamp, episode_id))


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


class SessionSummaries(MemoryStore):
    """One summary per session (``get`` takes the session id); at most ``max_rows``, oldest dropped first."""

    TABLE = Table(
        "session_summaries", SessionSummary, weights=(1.0, 1.0), half_life_days=30.0, quality=lambda s: 0.5,
        stamp=lambda s: s.created_at, prune_order="created_at ASC", max_rows=1_000, key="session_id",
        checks={"session_id": _SESSION, "summary": text(), "key_decisions": text(), "turn_count": _count,
                "total_tokens": _count, "total_cost_cents": _count},
        decode={"key_decisions": json_list, "tools_used": json_list, "outcomes": json_list},
    )

    def save(self, session_id: str, summary: str, *, key_decisions: Sequence[str] = (), tools_used: Sequence[str] = (),
             outcomes: Sequence[str] = (), turn_count: int = 0, total_tokens: int = 0,
             total_cost_cents: int = 0) -> SessionSummary:
        """Create or replace the summary of ``session_id``."""
        lists = {name: json.dumps([str(x) for x in value]) for name, value in
                 (("key_decisions", key_decisions), ("tools_used", tools_used), ("outcomes", outcomes))}
        now = self.now()
        self._insert({"id": new_ulid(now), "session_id": session_id, "summary": summary, **lists,
                      "turn_count": turn_count, "total_tokens": total_tokens, "total_cost_cents": total_cost_cents,
                      "created_at": to_iso(now)}, upsert=("session_id",), keep=("id",))
        return self.get(session_id)


# --- facts ----------------------------------------------------------------------------------------------------


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


class SemanticMemory(MemoryStore):
    """Facts as category / key / value with a confidence in 0..1 (the memory document's subject and predicate
    are the key, its object the value). Retention drops unprotected facts, least confident and oldest first."""

    TABLE = Table(
        "semantic_memory", Fact, weights=(0.5, 2.0, 1.0), half_life_days=90.0, quality=lambda f: f.confidence,
        stamp=lambda f: f.updated_at, prune_order="confidence ASC, updated_at ASC", max_rows=2_000,
        checks={"category": one_of(CATEGORIES), "key": text(200), "value": text(), "source": text(200),
                "confidence": unit, "min_confidence": unit},
        filters={"category": "t.category = ?", "min_confidence": "t.confidence >= ?"},
        protected=f"category = 'creator' OR source = '{CREATOR_SOURCE}'",
    )

    def remember(self, category: str, key: str, value: str, *, source: str, confidence: float = 1.0) -> Fact:
        """Store a fact, or update the one with the same category and key (its id is kept); a protected fact is
        changed only by the creator's source."""
        values = self._checked({"category": category, "key": key, "value": value, "confidence": confidence,
                                "source": source})
        now = to_iso(self.now())
        with self.db.transaction():
            existing = self.get_by_key(category, key)
            if existing is not None and existing.protected and source != CREATOR_SOURCE:
                raise ProtectedMemoryError(
                    f"fact {category}/{key} came from the creator; only the creator can change it")
            if existing is None:
                self._insert({"id": new_ulid(self.now()), **values, "created_at": now, "updated_at": now})
            else:
                self._update(existing.id, {"value": value, "confidence": confidence, "source": source,
                                           "updated_at": now})
        return self.get_by_key(category, key)

    def get_by_key(self, category: str, key: str) -> Fact | None:
        found = self._select("t.category = ? AND t.key = ?", (category, key))
        return found[0] if found else None

    def by_category(self, category: str, *, limit: int = 50) -> list[Fact]:
        """A category's facts, most confident first, then most recently updated."""
        self._checked({"category": category})
        return self._select("t.category = ?", (category,), order="t.confidence DESC, t.updated_at DESC", limit=limit)


# --- procedures -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Procedure:
    id: str
    name: str
    description: str
    steps: list[dict[str, Any]]
    success_count: int
    failure_count: int
    last_used_at: str | None
    created_at: str
    updated_at: str

    @property
    def times_executed(self) -> int:
        return self.success_count + self.failure_count

    @property
    def smoothed_success_rate(self) -> float:
        """``(s + 1) / (s + f + 2)``: 0.5 for an untried procedure, moving toward the real rate with use."""
        return (self.success_count + 1) / (self.times_executed + 2)


def _steps(name: str, steps: Any) -> str:
    """The steps as stored JSON: a non-empty list of objects, each with a description (or an action)."""
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence) or not steps:
        raise MemoryStoreError(f"{name}: expected a non-empty list of steps")
    if len(steps) > MAX_STEPS:
        raise MemoryStoreError(f"{name}: at most {MAX_STEPS}, got {len(steps)}")
    for number, step in enumerate(steps, 1):
        if not isinstance(step, dict):
            raise MemoryStoreError(f"{name}[{number}]: expected an object")
        described = step.get("description", step.get("action"))
        if not isinstance(described, str) or not described.strip():
            raise MemoryStoreError(f"{name}[{number}]: needs a description")
    return text()(name, json.dumps(list(steps), ensure_ascii=False))


class ProceduralMemory(MemoryStore):
    """Named step-by-step procedures (``get`` takes the name) with success and failure counts. Retention drops
    the lowest smoothed success rate, least recently used first."""

    TABLE = Table(
        "procedural_memory", Procedure, weights=(2.0, 1.0, 0.5), half_life_days=60.0,
        quality=lambda p: p.smoothed_success_rate, stamp=lambda p: p.last_used_at or p.updated_at, max_rows=500,
        prune_order="(success_count + 1.0) / (success_count + failure_count + 2) ASC,"
                    " COALESCE(last_used_at, updated_at) ASC",
        key="name", checks={"name": text(200), "description": text(), "steps": _steps, "min_success_rate": unit},
        filters={"min_success_rate": "t.success_count + t.failure_count = 0"
                                     " OR t.success_count * 1.0 / (t.success_count + t.failure_count) >= ?"},
        decode={"steps": json_list},
    )

    def save(self, name: str, description: str, steps: Sequence[dict[str, Any]]) -> Procedure:
        """Create a procedure, or replace the description and steps of the one with this name (counts kept)."""
        now = to_iso(self.now())
        self._insert({"id": new_ulid(self.now()), "name": name, "description": description, "steps": steps,
                      "created_at": now, "updated_at": now}, upsert=("name",), keep=("id", "created_at"))
        return self.get(name)


# --- relationships --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Relationship:
    id: str
    entity_address: str
    entity_name: str | None
    relationship_type: str
    trust_score: float
    interaction_count: int
    last_interaction_at: str | None
    notes: str | None
    created_at: str
    updated_at: str

    @property
    def protected(self) -> bool:
        return self.relationship_type == "creator"


def normalize_address(address: str) -> str:
    text(200)("entity_address", address)
    address = address.strip()
    return address.lower() if _HEX_ADDRESS.fullmatch(address) else address


class RelationshipMemory(MemoryStore):
    """Known agents and people by address (``get`` takes the address): a type, a trust score in 0..1, an
    interaction count and notes. Retention drops the fewest interactions, lowest trust, least recent first."""

    TABLE = Table(
        "relationship_memory", Relationship, weights=(2.0, 2.0, 0.5, 1.0), half_life_days=30.0,
        quality=lambda e: e.trust_score, stamp=lambda e: e.last_interaction_at or e.updated_at, max_rows=1_000,
        prune_order="interaction_count ASC, trust_score ASC, COALESCE(last_interaction_at, updated_at) ASC",
        key="entity_address",
        checks={"relationship_type": one_of(RELATIONSHIP_TYPES), "entity_name": text(200, required=False),
                "notes": text(required=False), "trust_score": unit},
        protected="relationship_type = 'creator'",
    )

    def get(self, address: str) -> Relationship | None:
        address = normalize_address(address)
        found = self._select("t.entity_address = ? OR lower(t.entity_address) = ?", (address, address.lower()),
                             limit=1)
        return found[0] if found else None

    def record(self, address: str, *, relationship_type: str | None = None, name: str | None = None,
               trust: float | None = None, notes: str | None = None) -> Relationship:
        """Create or update the entry of ``address``; fields left ``None`` keep their value (new: peer, 0.5)."""
        address = normalize_address(address)
        given = {k: v for k, v in (("relationship_type", relationship_type), ("entity_name", name),
                                   ("trust_score", trust), ("notes", notes)) if v is not None}
        now = to_iso(self.now())
        with self.db.transaction():
            existing = self.get(address)
            if existing is None:
                self._insert({"id": new_ulid(self.now()), "entity_address": address, "relationship_type": "peer",
                              "trust_score": 0.5, **given, "created_at": now, "updated_at": now})
            else:
                self._update(existing.id, {**given, "updated_at": now})
        return self.get(address)

    def record_interaction(self, address: str, *, default_type: str = "contacted") -> Relationship:
        """Count one interaction (creating the entry with ``default_type`` and trust 0.5 if unknown)."""
        with self.db.transaction():
            entry = self.get(address) or self.record(address, relationship_type=default_type)
            stamp = to_iso(self.now())
            self.db.execute("UPDATE relationship_memory SET interaction_count = interaction_count + 1,"
                            " last_interaction_at = ?, updated_at = ? WHERE id = ?", (stamp, stamp, entry.id))
        return self.get(address)

    def add_note(self, address: str, note: str) -> Relationship:
        """Append a line to the notes (the oldest lines are dropped to stay within the text limit)."""
        text(2_000)("note", note)
        entry = self.get(address) or self.record(address)
        notes = f"{entry.notes}\n{note}" if entry.notes else note
        while len(notes) > MAX_TEXT and "\n" in notes:
            notes = notes.split("\n", 1)[1]
        return self.record(address, notes=notes[-MAX_TEXT:])

    def trusted(self, *, min_trust: float = 0.5, limit: int = 10) -> list[Relationship]:
        """Entries at or above ``min_trust``, most trusted first, then most interactions."""
        return self._select("t.trust_score >= ?", (min_trust,), order="t.trust_score DESC, t.interaction_count DESC",
                            limit=limit)


STORES: tuple[type[MemoryStore], ...] = (WorkingMemory, EpisodicMemory, SessionSummaries, SemanticMemory,
                                         ProceduralMemory, RelationshipMemory)

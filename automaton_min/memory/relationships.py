"""Relationship memory (``relationship_memory``): known agents and people by address, with a type, a trust score
in 0..1, an interaction count and notes.

Addresses are matched without regard to case (0x addresses are stored lowercase; a reference row keeps its
spelling). The creator's entry (type ``creator``) cannot be forgotten or pruned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from automaton_min.clock import Clock, to_iso
from automaton_min.ids import new_ulid
from automaton_min.memory.common import (
    MAX_TEXT,
    MemoryStoreError,
    ProtectedMemoryError,
    Ranked,
    choice,
    prune_to,
    ranked_search,
    text,
    unit,
)

if TYPE_CHECKING:
    from automaton_min.store.db import Database

# The memory document's types, and the two the reference's ingestion writes.
RELATIONSHIP_TYPES = ("creator", "child", "parent", "peer", "client", "service_provider", "contacted", "messaged_us")
_HEX_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_COLUMNS = ("t.id, t.entity_address, t.entity_name, t.relationship_type, t.trust_score, t.interaction_count,"
            " t.last_interaction_at, t.notes, t.created_at, t.updated_at")


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
    text("entity_address", address, limit=200)
    address = address.strip()
    return address.lower() if _HEX_ADDRESS.fullmatch(address) else address


class RelationshipMemory:
    """Record, read, update, search, forget and prune relationships.

    Bound: at most ``max_rows``; retention drops the fewest interactions, lowest trust, least recent first,
    never the creator.
    """

    HALF_LIFE_DAYS = 30.0

    def __init__(self, db: "Database", now: Clock, *, max_rows: int = 1_000) -> None:
        self.db, self.now, self.max_rows = db, now, max_rows

    def record(self, address: str, *, relationship_type: str | None = None, name: str | None = None,
               trust: float | None = None, notes: str | None = None) -> Relationship:
        """Create or update the entry of ``address``; fields left ``None`` keep their value (new: peer, 0.5)."""
        address = normalize_address(address)
        if relationship_type is not None:
            choice("relationship_type", relationship_type, RELATIONSHIP_TYPES)
        text("name", name, required=False, limit=200)
        text("notes", notes, required=False)
        if trust is not None:
            unit("trust", trust)
        now = to_iso(self.now())
        with self.db.transaction():
            existing = self.get(address)
            if existing is None:
                self.db.execute(
                    "INSERT INTO relationship_memory (id, entity_address, entity_name, relationship_type, trust_score,"
                    " notes, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (new_ulid(self.now()), address, name, relationship_type or "peer",
                     0.5 if trust is None else float(trust), notes, now, now),
                )
            else:
                self.db.execute(
                    "UPDATE relationship_memory SET entity_name = ?, relationship_type = ?, trust_score = ?, notes = ?,"
                    " updated_at = ? WHERE id = ?",
                    (existing.entity_name if name is None else name,
                     existing.relationship_type if relationship_type is None else relationship_type,
                     existing.trust_score if trust is None else float(trust),
                     existing.notes if notes is None else notes, now, existing.id),
                )
        return self.get(address)  # type: ignore[return-value]

    def get(self, address: str) -> Relationship | None:
        row = self.db.query_one(
            f"SELECT {_COLUMNS} FROM relationship_memory t WHERE t.entity_address = ? OR lower(t.entity_address) = ?"
            " LIMIT 1",
            (normalize_address(address), normalize_address(address).lower()),
        )
        return Relationship(*row) if row else None

    def record_interaction(self, address: str, *, default_type: str = "contacted") -> Relationship:
        """Count one interaction (creating the entry with ``default_type`` and trust 0.5 if unknown)."""
        with self.db.transaction():
            if self.get(address) is None:
                self.record(address, relationship_type=default_type)
            entry = self.get(address)
            stamp = to_iso(self.now())
            self.db.execute(
                "UPDATE relationship_memory SET interaction_count = interaction_count + 1, last_interaction_at = ?,"
                " updated_at = ? WHERE id = ?",
                (stamp, stamp, entry.id),  # type: ignore[union-attr]
            )
        return self.get(address)  # type: ignore[return-value]

    def adjust_trust(self, address: str, delta: float) -> Relationship:
        """Move the trust score by ``delta``, clamped to 0..1."""
        entry = self.get(address)
        if entry is None:
            raise MemoryStoreError(f"relationship {address!r}: not found")
        return self.record(address, trust=min(1.0, max(0.0, entry.trust_score + float(delta))))

    def add_note(self, address: str, note: str) -> Relationship:
        """Append a line to the notes (the oldest lines are dropped to stay within the text limit)."""
        text("note", note, limit=2_000)
        entry = self.get(address) or self.record(address)
        notes = f"{entry.notes}\n{note}" if entry.notes else note
        while len(notes) > MAX_TEXT and "\n" in notes:
            notes = notes.split("\n", 1)[1]
        return self.record(address, notes=notes[-MAX_TEXT:])

    def forget(self, address: str) -> bool:
        """Delete an entry; the creator's raises ``ProtectedMemoryError``."""
        entry = self.get(address)
        if entry is None:
            return False
        if entry.protected:
            raise ProtectedMemoryError(f"{entry.entity_address} is the creator and cannot be forgotten")
        self.db.execute("DELETE FROM relationship_memory WHERE id = ?", (entry.id,))
        return True

    delete = forget

    def trusted(self, *, min_trust: float = 0.5, limit: int = 10) -> list[Relationship]:
        """Entries at or above ``min_trust``, most trusted first, then most interactions."""
        rows = self.db.query(
            f"SELECT {_COLUMNS} FROM relationship_memory t WHERE t.trust_score >= ?"
            " ORDER BY t.trust_score DESC, t.interaction_count DESC LIMIT ?",
            (min_trust, limit),
        )
        return [Relationship(*r) for r in rows]

    def search(self, query: str, *, limit: int = 5) -> list[Ranked[Relationship]]:
        """Entries matching ``query`` (address, name, type, notes), ranked (quality = trust, half-life 30 days)."""
        return ranked_search(
            self.db, table="relationship_memory", select=_COLUMNS, query=query, weights=(2.0, 2.0, 0.5, 1.0),
            limit=limit, now_ms=self.now(), half_life_days=self.HALF_LIFE_DAYS, build=lambda r: Relationship(*r),
            quality=lambda e: e.trust_score, stamp=lambda e: e.last_interaction_at or e.updated_at,
        )

    def prune(self) -> int:
        """Keep at most ``max_rows`` entries."""
        return prune_to(
            self.db, "relationship_memory", keep=self.max_rows,
            order="interaction_count ASC, trust_score ASC, COALESCE(last_interaction_at, updated_at) ASC",
            deletable="relationship_type <> 'creator'",
        )

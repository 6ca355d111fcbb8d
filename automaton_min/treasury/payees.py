"""Known payees (README: Payments): the addresses credits may go to without the creator's approval.

This module keeps the list (the creator, ``treasuryPolicy.knownPayees``, the ``known_payees`` table the creator's
``payee add`` fills, the children whose wallet was verified); the rule that reads it is ``money_out.payee_refusal``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from automaton_min.clock import to_iso
from automaton_min.store.children import fundable_addresses

if TYPE_CHECKING:
    from automaton_min.store.db import Database

CONFIG_KEY = "treasuryPolicy.knownPayees"
MAX_ADDED = 200  # payees the creator may add by message; the configuration has its own limit


@dataclass(frozen=True)
class KnownPayees:
    """The known payees as one reading of the configuration and the ``known_payees`` table (all lowercase)."""

    creator: str | None
    configured: frozenset[str]
    added: frozenset[str]
    children: frozenset[str] = frozenset()

    def why_known(self, address: str) -> str | None:
        """Why ``address`` may be paid without approval (``"the creator"``, ...), or ``None`` when it is unknown."""
        key = address.lower() if isinstance(address, str) else ""
        if self.creator and key == self.creator:
            return "the creator"
        if key in self.configured:
            return CONFIG_KEY
        if key in self.added:
            return "added by the creator"
        if key in self.children:
            return "a child"
        return None

    def with_configured(self, address: str) -> list[str]:
        """The configured list with ``address`` added, as ``config set`` would take it."""
        return sorted(self.configured | {address.lower()})


def known_payees(db: "Database | None", config: Any) -> KnownPayees:
    """Read the known payees from ``config`` (a ``Config`` or a mapping) and ``db`` (``None``: configuration only)."""
    creator = config.get("creatorAddress") if config is not None else None
    policy = (config.get("treasuryPolicy") if config is not None else None) or {}
    configured = policy.get("knownPayees") if isinstance(policy, Mapping) else None
    added: frozenset[str] = frozenset()
    children: frozenset[str] = frozenset()
    if db is not None and db.scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'known_payees'"):
        added = frozenset(row[0] for row in db.query("SELECT address FROM known_payees"))
    if db is not None:
        children = fundable_addresses(db)  # verified wallets of children that are not stopped or gone
    return KnownPayees(creator.lower() if isinstance(creator, str) and creator else None,
                       frozenset(a.lower() for a in configured or () if isinstance(a, str)), added, children)


def apply_command(db: "Database", command: tuple[str, str], *, message_id: str, now_ms: int) -> str:
    """Apply the creator's verified ``payee add|remove``; a note on what changed (inside intake's transaction)."""
    verb, address = command
    if verb == "remove":
        db.execute("DELETE FROM known_payees WHERE address = ?", (address,))
        if db.connection.changes():
            return f"{address} is no longer a known payee"
        return (f"{address} was not added by message; nothing changed (a payee in {CONFIG_KEY} is removed with "
                "config set)")
    if db.scalar("SELECT 1 FROM known_payees WHERE address = ?", (address,)):
        return f"{address} is already a known payee"
    if (db.scalar("SELECT COUNT(*) FROM known_payees") or 0) >= MAX_ADDED:
        return f"{address} was not added: {MAX_ADDED} payees were already added by message; remove one first"
    db.execute("INSERT INTO known_payees (address, added_by_message, added_at) VALUES (?, ?, ?)",
               (address, message_id, to_iso(now_ms)))
    return f"{address} is now a known payee"

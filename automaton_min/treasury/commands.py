"""The creator's money commands (``approve``/``reject apr_<ULID>``, ``payee add``/``remove 0x...``), each the whole
text of a relay message signed by the creator. This module owns their grammar: intake reads them with it, and the
agent's own ``send_message`` refuses to send one (README: Creator approvals); and their order: a command applies
only when signed after the last one applied to the same payee or request (table ``creator_commands``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from automaton_min.clock import from_iso, to_iso

if TYPE_CHECKING:
    from automaton_min.store.db import Database

_APPROVAL = re.compile(r"(approve|reject) (apr_[0-9A-HJKMNP-TV-Z]{26})")
_PAYEE = re.compile(r"payee (add|remove) (0x[0-9a-fA-F]{40})")


def parse_approval(content: str) -> tuple[str, str] | None:
    """``("approve"|"reject", request id)`` when the whole text is an approval command, else ``None``."""
    match = _APPROVAL.fullmatch(content.strip()) if isinstance(content, str) else None
    return (match.group(1), match.group(2)) if match else None


def parse_payee(content: str) -> tuple[str, str] | None:
    """``("add"|"remove", lowercase address)`` when the whole text is a payee command, else ``None``."""
    match = _PAYEE.fullmatch(content.strip()) if isinstance(content, str) else None
    return (match.group(1), match.group(2).lower()) if match else None


def is_creator_command(content: str) -> bool:
    """Whether ``content`` is read as one of the creator's money commands."""
    return parse_approval(content) is not None or parse_payee(content) is not None


def out_of_order(db: "Database", command: tuple[str, str], signed_at: str, message_id: str) -> str | None:
    """Why ``command`` is not applied: it was signed no later than the last one applied to the same payee or
    request (an old command served again, or out of order); else None, and it is recorded as that last one."""
    signed, subject = to_iso(from_iso(signed_at)), command[1]
    last = db.scalar("SELECT signed_at FROM creator_commands WHERE subject = ?", (subject,))
    if last is not None and signed <= last:
        return f"{command[0]} {subject} not applied: signed at {signed}, not after the last command about it ({last})"
    db.execute("INSERT OR REPLACE INTO creator_commands (subject, signed_at, message_id) VALUES (?, ?, ?)",
               (subject, signed, message_id))
    return None

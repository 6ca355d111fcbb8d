"""The creator's money commands, as the whole text of a relay message signed by the creator.

- ``approve apr_<ULID>`` / ``reject apr_<ULID>``: decide a held transfer (``social.approvals``);
- ``payee add 0x...`` / ``payee remove 0x...``: change the known payees (``treasury.payees``).

This module owns their grammar: intake reads a verified creator message with it, and the agent's own
``send_message`` refuses to send such a text (a stranger must not get an agent to relay its creator's commands to
the agent's children; the creator sends them with ``automaton-min send``).
"""

from __future__ import annotations

import re

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

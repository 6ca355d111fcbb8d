"""The creator's money commands (``approve``/``reject apr_<ULID>``, ``payee add``/``remove 0x...``), each the whole
text of a relay message signed by the creator. This module owns their grammar: intake reads them with it, and the
agent's own ``send_message`` refuses to send one (README: Creator approvals).
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

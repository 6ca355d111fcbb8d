"""ULIDs: sortable 26-character ids (48-bit millisecond time + 80 random bits)."""

from __future__ import annotations

import secrets

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_ulid(now_ms: int) -> str:
    """A fresh ULID for the given time in epoch milliseconds."""
    value = ((now_ms & ((1 << 48) - 1)) << 80) | secrets.randbits(80)
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))

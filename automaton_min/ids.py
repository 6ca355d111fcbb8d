"""ULIDs: sortable 26-character ids (48-bit millisecond time + 80 random bits).

Monotonic within a millisecond: a second id for the same millisecond is the last one plus one, so ids made for one
time (two turns in a millisecond, a fixed test clock) sort in the order they were made. The last 256 milliseconds
used are remembered, so a fixed clock and a real one in one process do not disturb each other.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RANDOM_BITS = 80
_REMEMBERED_MS = 256
_lock = threading.Lock()
_last_by_ms: "OrderedDict[int, int]" = OrderedDict()  # the last id made for each recent millisecond


def new_ulid(now_ms: int) -> str:
    """A fresh ULID for the given time in epoch milliseconds."""
    ms = now_ms & ((1 << 48) - 1)
    value = (ms << _RANDOM_BITS) | secrets.randbits(_RANDOM_BITS)
    with _lock:
        last = _last_by_ms.pop(ms, 0)
        if value <= last:
            value = last + 1
        _last_by_ms[ms] = value
        if len(_last_by_ms) > _REMEMBERED_MS:
            _last_by_ms.popitem(last=False)
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))

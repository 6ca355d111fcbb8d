"""The one clock and the one timestamp format (README: The home directory, timestamps); SQLite writes it with
``SQL_NOW``. Code that needs the time takes a ``now`` callable returning epoch milliseconds.
"""

from __future__ import annotations

import functools
import re
import time
from datetime import datetime, timedelta, timezone
from typing import Callable

Clock = Callable[[], int]

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS

SQL_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ','now')"

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_STORED = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


def system_now() -> int:
    """Current time as integer epoch milliseconds."""
    return time.time_ns() // 1_000_000


def to_iso(ms: int) -> str:
    """Render epoch milliseconds in the stored format."""
    dt = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


@functools.lru_cache(maxsize=4096)  # ranking parses the same rows' times turn after turn
def from_iso(text: str) -> int:
    """Parse the stored format, or the SQLite/ISO variants older databases hold, into epoch ms."""
    cleaned = text.strip().replace(" ", "T", 1)
    if cleaned.endswith("Z"):
        cleaned = cleaned[:-1] + "+00:00"
    dt = datetime.fromisoformat(cleaned)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return (dt - _EPOCH) // timedelta(milliseconds=1)


def is_stored_format(text: str) -> bool:
    """True when ``text`` is already in the one stored format."""
    return bool(_STORED.fullmatch(text))

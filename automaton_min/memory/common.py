"""What the memory stores share: errors, value checks, the FTS5 query words and ranked search (README: Memory).

A match scores ``combine(relevance, quality, recency)``: relevance is bm25 over the best candidate's (a row that
does not match is never returned); ties keep bm25 order.
"""

from __future__ import annotations

import math
import re
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import apsw

from automaton_min.clock import DAY_MS, from_iso

if TYPE_CHECKING:
    from automaton_min.store.db import Database

T = TypeVar("T")

AGENT_SESSION = "agent"  # the one stable session of the agent's own memories: goals, notes, episodes, the summary
MAX_TEXT = 8_000  # characters in any one text field
MAX_QUERY_TERMS = 16


class MemoryStoreError(ValueError):
    """A value breaks a memory store's rule (range, category, length); the message names the field."""


class ProtectedMemoryError(MemoryStoreError):
    """The entry was given by the creator (or is about the creator) and cannot be forgotten or overwritten."""


def unit(name: str, value: float) -> float:
    """``value`` as a float in 0..1, or an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise MemoryStoreError(f"{name}: expected a number between 0 and 1, got {value!r}")
    if not 0.0 <= value <= 1.0:
        raise MemoryStoreError(f"{name}: must be between 0 and 1, got {value}")
    return float(value)


def text(limit: int = MAX_TEXT, *, required: bool = True) -> Callable[[str, Any], str | None]:
    """A check of a text field: a string, non-blank when required, at most ``limit`` characters."""
    def check(name: str, value: Any) -> str | None:
        if value is None:
            if required:
                raise MemoryStoreError(f"{name}: required")
            return None
        if not isinstance(value, str):
            raise MemoryStoreError(f"{name}: expected text, got {type(value).__name__}")
        if required and not value.strip():
            raise MemoryStoreError(f"{name}: must not be blank")
        if len(value) > limit:
            raise MemoryStoreError(f"{name}: at most {limit} characters, got {len(value)}")
        return value
    return check


def one_of(allowed: Sequence[str], *, optional: bool = False) -> Callable[[str, Any], str | None]:
    """A check that a value is one of ``allowed`` (or ``None`` when optional)."""
    def check(name: str, value: Any) -> str | None:
        if value not in allowed and not (optional and value is None):
            raise MemoryStoreError(f"{name}: expected one of {', '.join(allowed)}, got {value!r}")
        return value
    return check


def estimate_tokens(value: str | None) -> int:
    """A cheap token estimate (4 characters a token) until the real counter is passed in."""
    return math.ceil(len(value or "") / 4)


# --- FTS5 queries ----------------------------------------------------------------------------------------

_TERM = re.compile(r"[^\W_]+", re.UNICODE)
STOPWORDS = frozenset(
    "a an and are as at be but by did do does for from had has have how i if in is it its me my no not of on or"
    " our so that the their them then there these they this to was we were what when where which who why will"
    " with you your".split()
)


def query_words(user_text: str, *, max_terms: int = MAX_QUERY_TERMS) -> list[str]:
    """The words of free text worth searching for: case-folded, without duplicates, stop words (unless nothing
    else is left) and beyond ``max_terms`` (the longest are kept, as they tend to be the most telling)."""
    words: list[str] = []
    seen: set[str] = set()
    for word in _TERM.findall(user_text or ""):
        folded = word.casefold()
        if folded not in seen:
            seen.add(folded)
            words.append(folded)
    kept = [w for w in words if w not in STOPWORDS] or words
    if len(kept) > max_terms:
        longest = set(sorted(kept, key=len, reverse=True)[:max_terms])
        kept = [w for w in kept if w in longest][:max_terms]
    return kept


def match_expression(words: Sequence[str]) -> str | None:
    """An FTS5 MATCH expression: each word quoted (so AND, OR, NOT, NEAR, ``*``, ``^``, ``:`` and parentheses
    are plain words), joined with OR; ``None`` for no words."""
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words) or None


COMMON_MIN_ROWS = 2_000
COMMON_FRACTION = 0.05
MAX_POSTINGS = 500  # matching rows ranked per search, at most (summed over the words kept)
MAX_RANKED_TERMS = 8  # each word costs a posting-list lookup even when it is rare
COUNTS_GENERATION = 1_000  # rows a table may grow before its remembered word counts are read again
COUNTS_KEPT = 20_000  # remembered word counts per table, at most


_counts_lock = threading.Lock()
# database -> table -> (generation, term -> docs); weak, so a closed database's counts go with it
_counts: "weakref.WeakKeyDictionary[Database, dict[str, tuple[int, dict[str, int]]]]" = weakref.WeakKeyDictionary()


def _document_counts(db: "Database", table: str, terms: set[str], rows: int) -> dict[str, int]:
    """How many rows of ``table`` hold each stemmed term (FTS5 vocabulary, which reads whole posting lists), kept per
    connection until the table grows by ``COUNTS_GENERATION`` rows."""
    generation = rows // COUNTS_GENERATION
    with _counts_lock:
        tables = _counts.setdefault(db, {})
        known_generation, known = tables.get(table, (generation, {}))
        if known_generation != generation or len(known) > COUNTS_KEPT:
            known = {}
        tables[table] = (generation, known)
        missing = sorted(t for t in terms if t not in known)
    if missing:
        vocab = f"{table}_fts_vocab"
        db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{vocab} USING fts5vocab(main, {table}_fts, row)")
        found = dict(db.query(f"SELECT term, doc FROM temp.{vocab} WHERE term IN ({', '.join('?' * len(missing))})",
                              missing))
        with _counts_lock:
            known.update({t: int(found.get(t, 0)) for t in missing})
    return {t: known.get(t, 0) for t in terms}


def drop_common_words(db: "Database", table: str, words: list[str]) -> list[str]:
    """Leave out words in over 5% of a table of 2,000 rows or more (costly to rank, telling little), but keep the two
    rarest when only such words are left; of the rest keep the rarest within ``MAX_RANKED_TERMS`` and
    ``MAX_POSTINGS``. Without apsw's FTS5 tokenizer access (3.47+), to stem them as indexed, words come back as given.
    """
    tokenizer_of = getattr(db.connection, "fts5_tokenizer", None)
    if len(words) < 2 or tokenizer_of is None:
        return words
    rows = db.scalar(f"SELECT MAX(rowid) FROM {table}", default=0) or 0  # about the row count, without a scan
    if rows < COMMON_MIN_ROWS:
        return words
    tokenize = tokenizer_of("porter", ["unicode61", "remove_diacritics", "2"])
    stems = {w: tokenize(w.encode(), apsw.FTS5_TOKENIZE_QUERY, None, include_offsets=False,
                         include_colocated=False) for w in words}
    found = _document_counts(db, table, {t for ts in stems.values() for t in ts}, rows)
    docs = {w: min((found.get(t, 0) for t in ts), default=0) for w, ts in stems.items()}
    rare = [w for w in words if docs[w] <= rows * COMMON_FRACTION]
    if not rare:
        return sorted(words, key=docs.__getitem__)[:2]
    kept, postings = set(), 0
    for word in sorted(rare, key=docs.__getitem__):  # the rarest first, while the ranking work stays bounded
        if kept and (postings + docs[word] > MAX_POSTINGS or len(kept) == MAX_RANKED_TERMS):
            break
        kept.add(word)
        postings += docs[word]
    return [w for w in words if w in kept]


# --- ranked search ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ranked(Generic[T]):
    """A search result: the entry and its score (higher is better)."""

    item: T
    score: float


def recency(stamp: str | None, now_ms: int, half_life_days: float) -> float:
    if not stamp:
        return 0.0
    try:
        age_days = max(0.0, (now_ms - from_iso(stamp)) / DAY_MS)
    except ValueError:
        return 0.0
    return 0.5 ** (age_days / half_life_days)


def combine(relevance: float, quality: float, fresh: float) -> float:
    return relevance * (0.5 + 0.3 * min(1.0, max(0.0, quality)) + 0.2 * fresh)


def ranked_search(
    db: "Database",
    *,
    table: str,
    select: str,
    query: str,
    weights: Sequence[float],
    limit: int,
    now_ms: int,
    half_life_days: float,
    build: Callable[[tuple[Any, ...]], T],
    quality: Callable[[T], float],
    stamp: Callable[[T], str | None],
    where: str = "",
    params: Sequence[Any] = (),
    pool: int | None = None,
) -> list[Ranked[T]]:
    """Rank ``table``'s rows matching free-text ``query`` by ``combine``; ``select`` and ``where`` name columns of the
    base table, aliased ``t``."""
    if limit <= 0:
        return []
    match = match_expression(drop_common_words(db, table, query_words(query)))
    if match is None:
        return []
    fts = f"{table}_fts"
    bm25 = f"bm25({fts}, {', '.join(str(float(w)) for w in weights)})"
    extra = f" AND ({where})" if where else ""
    rows = db.query(
        f"SELECT {bm25}, {select} FROM {fts} JOIN {table} t ON t.rowid = {fts}.rowid"
        f" WHERE {fts} MATCH ?{extra} ORDER BY {bm25} LIMIT ?",
        (match, *params, pool or max(20, limit * 3)),
    )
    if not rows:
        return []
    best = max(-row[0] for row in rows) or 1.0
    scored: list[Ranked[T]] = []
    for row in rows:
        item = build(row[1:])
        relevance = max(0.0, -row[0]) / best if best > 0 else 1.0
        scored.append(Ranked(item, combine(relevance, quality(item), recency(stamp(item), now_ms, half_life_days))))
    scored.sort(key=lambda r: r.score, reverse=True)  # stable: ties keep bm25 order
    return scored[:limit]

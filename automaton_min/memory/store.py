"""One memory store class over a table description (``Table``): read, write with value checks, delete, search,
prune. The stores in ``stores.py`` add their few own methods.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

from automaton_min.clock import Clock, to_iso
from automaton_min.memory.common import MemoryStoreError, ProtectedMemoryError, Ranked, ranked_search

if TYPE_CHECKING:
    from automaton_min.store.db import Database

PRUNE_BATCH = 200
Check = Callable[[str, Any], Any]


def json_list(raw: str | None) -> list:
    """A stored JSON list; anything else reads as empty."""
    try:
        value = json.loads(raw or "[]")
    except ValueError:
        return []
    return value if isinstance(value, list) else []


@dataclass(frozen=True)
class Table:
    """A memory table as the store sees it. SQL fragments refer to the row as ``t`` where they say so."""

    name: str
    entry: type  # a dataclass; its fields are the columns read
    weights: tuple[float, ...]  # bm25 weight per FTS column (store/schema_memory.FTS_COLUMNS)
    half_life_days: float
    quality: Callable[[Any], float]  # 0..1, moves a match within its relevance
    stamp: Callable[[Any], str | None]  # the time its recency counts from
    prune_order: str  # rows that sort first are dropped first (``?`` is now)
    max_rows: int
    key: str = "id"  # the column ``get`` reads an entry by
    checks: Mapping[str, Check] = field(default_factory=dict)  # column (or search filter) -> check
    filters: Mapping[str, str] = field(default_factory=dict)  # search keyword -> condition on t, one ``?``
    decode: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)  # column -> reader
    protected: str = "0"  # rows delete refuses and prune keeps
    live: str = ""  # rows in force (condition on t, ``?`` is now); others are never listed or found

    @property
    def columns(self) -> str:
        return ", ".join(f"t.{f.name}" for f in fields(self.entry))


class MemoryStore:
    """The operations every memory store shares, over ``TABLE``. Holds no state beyond its bound."""

    TABLE: ClassVar[Table]

    def __init__(self, db: "Database", now: Clock, *, max_rows: int | None = None) -> None:
        self.db, self.now = db, now
        self.max_rows = self.TABLE.max_rows if max_rows is None else max_rows

    def get(self, key: str) -> Any:
        """The entry whose ``TABLE.key`` is ``key``, or ``None``."""
        found = self._select(f"t.{self.TABLE.key} = ?", (key,))
        return found[0] if found else None

    def delete(self, entry_id: str) -> bool:
        """Delete an entry by id; False when there is none, ``ProtectedMemoryError`` when it is the creator's."""
        table = self.TABLE
        self.db.execute(f"DELETE FROM {table.name} WHERE id = ? AND NOT ({table.protected})", (entry_id,))
        if self.db.connection.changes():
            return True
        if self.db.scalar(f"SELECT COUNT(*) FROM {table.name} WHERE id = ?", (entry_id,)):
            raise ProtectedMemoryError(f"memory {entry_id} is from or about the creator and cannot be forgotten")
        return False

    def search(self, query: str, *, limit: int = 10, **filters: Any) -> list[Ranked[Any]]:
        """Entries matching ``query`` (free text), ranked; ``filters`` are the table's keywords (None: unused)."""
        table = self.TABLE
        given = self._checked({k: v for k, v in filters.items() if v is not None})
        unknown = set(given) - set(table.filters)
        if unknown:
            raise TypeError(f"{table.name} search has no filter {', '.join(sorted(unknown))}")
        where = [table.filters[k] for k in given] + ([table.live] if table.live else [])
        params = [*given.values()] + ([to_iso(self.now())] if table.live else [])
        return ranked_search(
            self.db, table=table.name, select=table.columns, query=query, weights=table.weights, limit=limit,
            now_ms=self.now(), half_life_days=table.half_life_days, build=self._entry, quality=table.quality,
            stamp=table.stamp, where=" AND ".join(f"({w})" for w in where), params=params,
        )

    def prune(self) -> int:
        """Drop the first rows of ``TABLE.prune_order`` until ``max_rows`` remain (protected rows stay)."""
        order = self.TABLE.prune_order
        return prune_to(self.db, self.TABLE.name, keep=self.max_rows, order=order,
                        params=(to_iso(self.now()),) * order.count("?"), deletable=f"NOT ({self.TABLE.protected})")

    # --- for the stores

    def _entry(self, row: Sequence[Any]) -> Any:
        decode = self.TABLE.decode
        return self.TABLE.entry(*(decode[f.name](v) if f.name in decode else v
                                  for f, v in zip(fields(self.TABLE.entry), row)))

    def _select(self, where: str, params: Sequence[Any] = (), *, order: str = "", limit: int | None = None,
                live: bool = False) -> list[Any]:
        table = self.TABLE
        if live and table.live:
            where, params = f"({where}) AND ({table.live})", (*params, to_iso(self.now()))
        sql = f"SELECT {table.columns} FROM {table.name} t WHERE {where}" + (f" ORDER BY {order}" if order else "")
        if limit is not None:
            sql, params = sql + " LIMIT ?", (*params, limit)
        return [self._entry(row) for row in self.db.query(sql, params)]

    def _checked(self, values: Mapping[str, Any]) -> dict[str, Any]:
        checks = self.TABLE.checks
        return {k: checks[k](k, v) if k in checks else v for k, v in values.items()}

    def _insert(self, values: Mapping[str, Any], *, upsert: Sequence[str] = (), keep: Sequence[str] = ()) -> None:
        """Insert checked ``values``; on a conflict over ``upsert`` update every column but ``keep``."""
        values = self._checked(values)
        sql = (f"INSERT INTO {self.TABLE.name} ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})")
        if upsert:
            changed = [c for c in values if c not in (*upsert, *keep)]
            sql += f" ON CONFLICT ({', '.join(upsert)}) DO UPDATE SET " + ", ".join(
                f"{c} = excluded.{c}" for c in changed)
        self.db.execute(sql, tuple(values.values()))

    def _update(self, entry_id: str, values: Mapping[str, Any]) -> None:
        values = self._checked(values)
        self.db.execute(f"UPDATE {self.TABLE.name} SET {', '.join(f'{c} = ?' for c in values)} WHERE id = ?",
                        (*values.values(), entry_id))


def prune_to(db: "Database", table: str, *, keep: int, order: str, params: Sequence[Any] = (),
             deletable: str = "1", scope: str = "1", scope_params: Sequence[Any] = (), batch: int = PRUNE_BATCH) -> int:
    """Delete the rows first by ``order``, ``batch`` per transaction, until at most ``keep`` rows of ``scope`` remain;
    returns how many. Rows outside ``deletable`` stay (and count), so protected rows stop the shrinking."""
    if keep < 0:
        raise MemoryStoreError(f"keep: must be 0 or more, got {keep}")
    deleted = 0
    while True:
        with db.transaction():
            excess = db.scalar(f"SELECT COUNT(*) FROM {table} WHERE {scope}", scope_params) - keep
            if excess <= 0:
                return deleted
            db.execute(f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE ({scope})"
                       f" AND ({deletable}) ORDER BY {order} LIMIT ?)", (*scope_params, *params, min(excess, batch)))
            gone = db.connection.changes()
        deleted += gone
        if gone == 0:
            return deleted


def delete_where(db: "Database", table: str, where: str, params: Sequence[Any] = (), *,
                 batch: int = PRUNE_BATCH) -> int:
    """Delete every row matching ``where`` in batches of ``batch``, each its own transaction."""
    deleted = 0
    while True:
        with db.transaction():
            db.execute(f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE {where} LIMIT ?)",
                       (*params, batch))
            gone = db.connection.changes()
        deleted += gone
        if gone < batch:
            return deleted

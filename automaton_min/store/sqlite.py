"""``state.db``'s connection: the ``Database`` wrapper, its PRAGMAs and the SQL helpers schema steps use.

Each thread opens its own ``Database`` (WAL allows many readers and one writer;
the busy timeout makes writers wait their turn instead of failing).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw

from automaton_min.errors import DatabaseError
from automaton_min.log import get_logger

BUSY_TIMEOUT_MS = 5000

# Chosen for a Raspberry Pi on an SD card: WAL appends sequentially; NORMAL syncs only at checkpoints (a crash never
# corrupts, a power cut may drop the last commits, so money paths commit with ``durable=True``); temp tables in RAM;
# a bounded page cache; the WAL truncated back to 4 MiB; no mmap (an I/O error on a mapped page kills the process).
PRAGMAS: tuple[tuple[str, object], ...] = (
    ("journal_mode", "wal"),
    ("synchronous", "NORMAL"),
    ("foreign_keys", "ON"),
    ("temp_store", "MEMORY"),
    ("cache_size", -4096),
    ("journal_size_limit", 4 * 1024 * 1024),
    ("mmap_size", 0),
    ("wal_autocheckpoint", 1000),
)

Row = tuple[Any, ...]

# A write the disk refused: full (SQLITE_FULL), a failed write such as EFBIG past the file size limit
# (SQLITE_IOERR), a file system remounted read-only (SQLITE_READONLY). The database is intact (SQLite rolls the
# transaction back); the runtime waits for space instead of exiting (``runtime/daemon.py``).
STORAGE_ERRORS: tuple[type[apsw.Error], ...] = (apsw.FullError, apsw.IOError, apsw.ReadOnlyError)



class Database:
    """An open ``state.db`` connection with small query helpers and transactions."""

    def __init__(self, connection: apsw.Connection, path: Path) -> None:
        self.connection = connection
        self.path = path
        self._depth = 0
        self._owner = threading.get_ident()

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> apsw.Cursor:
        """Run one statement."""
        return self.connection.execute(sql, params)

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Row]:
        """All rows of a query as tuples."""
        return list(self.connection.execute(sql, params))

    def query_one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Row | None:
        """The first row of a query, or ``None``."""
        for row in self.connection.execute(sql, params):
            return row
        return None

    def scalar(self, sql: str, params: Sequence[Any] | dict[str, Any] = (), default: Any = None) -> Any:
        """The first column of the first row, or ``default``."""
        row = self.query_one(sql, params)
        return default if row is None else row[0]

    @contextmanager
    def transaction(self, *, durable: bool = False) -> Iterator["Database"]:
        """Commit the block at once, or nothing if it raises. The outermost takes the write lock up front (``BEGIN
        IMMEDIATE``), nested ones are savepoints; ``durable=True`` syncs the commit (``synchronous=FULL``: intents)."""
        if threading.get_ident() != self._owner:
            raise RuntimeError("a Database belongs to the thread that opened it")
        if self._depth:
            if durable:
                raise ValueError("durable=True needs the outermost transaction; a savepoint cannot sync on its own")
            savepoint = f"sp{self._depth}"
            self.connection.execute(f"SAVEPOINT {savepoint}")
            self._depth += 1
            try:
                yield self
            except BaseException:
                self.connection.execute(f"ROLLBACK TO {savepoint}; RELEASE {savepoint}")
                raise
            else:
                self.connection.execute(f"RELEASE {savepoint}")
            finally:
                self._depth -= 1
            return

        if durable:
            self.connection.execute("PRAGMA synchronous=FULL")
        try:
            self.connection.execute("BEGIN IMMEDIATE")
        except BaseException:  # e.g. BusyError: do not leave the connection at FULL
            if durable:
                self.connection.execute("PRAGMA synchronous=NORMAL")
            raise
        self._depth = 1
        try:
            yield self
        except BaseException:
            self._rollback()
            raise
        else:
            try:
                self.connection.execute("COMMIT")
            except BaseException:  # a full disk: SQLite may leave the transaction open, which would refuse every
                self._rollback()  # later BEGIN ("cannot start a transaction within a transaction") for good
                raise
        finally:
            self._depth = 0
            if durable:
                self.connection.execute("PRAGMA synchronous=NORMAL")

    def _rollback(self) -> None:
        """End the open transaction, unless SQLite already rolled it back itself (it does when a write fails, e.g.
        on a full disk): a ROLLBACK then fails with an SQLError that would hide the real error."""
        if self.connection.in_transaction:
            self.connection.execute("ROLLBACK")

    def pragma(self, name: str) -> Any:
        """The current value of a PRAGMA."""
        return self.scalar(f"PRAGMA {name}")

    def integrity_check(self) -> list[str]:
        """The full ``PRAGMA integrity_check`` (slow on big files): ``["ok"]`` when healthy."""
        return [row[0] for row in self.query("PRAGMA integrity_check")]

    def checkpoint(self) -> None:
        """Fold the WAL back into the database file and truncate it (at a clean shutdown)."""
        self.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def apply_pragmas(db: Database) -> None:
    for name, value in PRAGMAS:
        db.execute(f"PRAGMA {name}={value}")
    mode = db.pragma("journal_mode")
    if str(mode).lower() != "wal":
        raise apsw.CantOpenError(f"journal_mode is {mode}, expected wal")


def describe_error(exc: apsw.Error) -> str:
    text = str(exc)
    return text.split(": ", 1)[-1] if ": " in text else text or type(exc).__name__


def table_exists(db: "Database", table: str) -> bool:
    return bool(db.scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)))


def columns_of(db: "Database", table: str) -> list[str]:
    return [row[1] for row in db.query(f"PRAGMA table_info({table})")]


def add_missing_columns(db: "Database", table: str, columns: dict[str, str]) -> None:
    """``ALTER TABLE ... ADD COLUMN`` for each column the table lacks (errors are not swallowed)."""
    present = set(columns_of(db, table))
    for name, declaration in columns.items():
        if name not in present:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")


_STORED_GLOB = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z"


def normalize_timestamps(db: "Database", table: str, columns: Sequence[str]) -> None:
    """Rewrite date-time text in ``columns`` (the reference wrote ``2026-02-19 14:00:00`` and ``...T14:00:00.000Z``,
    which compare wrongly) into the one stored format; other values are left alone."""
    for column in columns:
        db.execute(
            f"UPDATE {table} SET {column} = strftime('%Y-%m-%dT%H:%M:%fZ', {column})"
            f" WHERE {column} GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*'"
            f" AND {column} NOT GLOB '{_STORED_GLOB}'"
            f" AND strftime('%Y-%m-%dT%H:%M:%fZ', {column}) IS NOT NULL"
        )

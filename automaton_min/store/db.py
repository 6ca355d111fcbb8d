"""The one way to open ``state.db``: PRAGMAs for an SD card, a quick check, migrations.

Each thread opens its own ``Database`` (WAL allows many readers and one writer;
the busy timeout makes writers wait their turn instead of failing).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw

from automaton_min.clock import Clock, system_now
from automaton_min.errors import DatabaseError
from automaton_min.observe.log import get_logger
from automaton_min.store.migrations import MIGRATIONS, Migration, migrate

BUSY_TIMEOUT_MS = 5000

# Chosen for a Raspberry Pi on an SD card: WAL appends sequentially; NORMAL syncs
# only at checkpoints (a crash never corrupts, a power cut may drop the last
# commits, so money paths commit with ``durable=True``); temp tables in RAM; a
# bounded page cache; the WAL truncated back to 4 MiB; no mmap (an I/O error on a
# mapped page kills the process).
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

log = get_logger(__name__)


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
        """Commit everything in the block at once, or nothing if it raises.

        The outermost block takes the write lock up front (``BEGIN IMMEDIATE``);
        nested blocks are savepoints. ``durable=True`` syncs the commit to disk
        before returning (``synchronous=FULL`` for this commit), for records that
        must survive a power cut, such as payment intents.
        """
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


def open_database(
    path: Path,
    *,
    migrations: Sequence[Migration] = MIGRATIONS,
    now: Clock = system_now,
    quick_check: bool = True,
    read_only: bool = False,
) -> Database:
    """Open (creating with mode 0600) ``state.db``, apply the PRAGMAs, quick-check it and migrate it.

    ``quick_check`` reads every page, so its cost grows with the file; a short
    read-only look (``status``) may skip it. The runtime and ``setup`` keep it;
    ``doctor`` adds the full ``integrity_check``. ``read_only=True`` (for the read
    commands) never creates, migrates or writes: a missing or empty file is a
    ``DatabaseError``.
    """
    path = Path(path)
    if read_only:
        return _open_read_only(path)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    connection = None
    try:
        connection = apsw.Connection(str(path))
        connection.set_busy_timeout(BUSY_TIMEOUT_MS)
        db = Database(connection, path)
        _apply_pragmas(db)
        if quick_check:
            problems = [row[0] for row in db.query("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise DatabaseError(f"{path} failed its quick check ({problems[0]}); run: automaton-min doctor")
        migrate(db, migrations, now)
    except BaseException as exc:
        if connection is not None:
            connection.close()
        if isinstance(exc, STORAGE_ERRORS):  # the disk refuses writes: the file itself may be fine
            raise DatabaseError(f"cannot write {path} ({_describe(exc)}): the disk may be full or read-only; free some "
                                "space on it (df -h) and start again") from None
        if isinstance(exc, apsw.Error):  # damaged file, unreadable schema_version, ...: one line, not a raw apsw error
            raise DatabaseError(f"{path} cannot be opened as a database ({_describe(exc)}); run: automaton-min doctor") from None
        raise
    log.debug("opened database", extra={"path": str(path), "quick_check": quick_check})
    return db


def _open_read_only(path: Path) -> Database:
    if not path.exists():
        raise DatabaseError(f"{path} is missing; run: automaton-min setup (it creates the database)")
    if path.stat().st_size == 0:
        raise DatabaseError(f"{path} is empty (0 bytes); restore it from a backup, or move it aside and run setup again")
    connection = None
    try:
        connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        connection.set_busy_timeout(BUSY_TIMEOUT_MS)
        db = Database(connection, path)
        for name in ("temp_store", "cache_size", "mmap_size"):
            db.execute(f"PRAGMA {name}={dict(PRAGMAS)[name]}")
        db.scalar("SELECT COUNT(*) FROM sqlite_master")  # a file that is not a database fails here
    except apsw.Error as exc:
        if connection is not None:
            connection.close()
        raise DatabaseError(f"{path} cannot be opened as a database ({_describe(exc)}); run: automaton-min doctor") from None
    log.debug("opened database", extra={"path": str(path), "read_only": True})
    return db


def _apply_pragmas(db: Database) -> None:
    for name, value in PRAGMAS:
        db.execute(f"PRAGMA {name}={value}")
    mode = db.pragma("journal_mode")
    if str(mode).lower() != "wal":
        raise apsw.CantOpenError(f"journal_mode is {mode}, expected wal")


def _describe(exc: apsw.Error) -> str:
    text = str(exc)
    return text.split(": ", 1)[-1] if ": " in text else text or type(exc).__name__


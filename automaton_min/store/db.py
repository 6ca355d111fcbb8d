"""The one way to open ``state.db``: PRAGMAs for an SD card, a quick check, migrations."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import apsw

from automaton_min.clock import Clock, system_now
from automaton_min.errors import DatabaseError
from automaton_min.log import get_logger
from automaton_min.store.migrations import MIGRATIONS, Migration, migrate
from automaton_min.store.sqlite import (BUSY_TIMEOUT_MS, PRAGMAS, STORAGE_ERRORS, Database, apply_pragmas,
                                        describe_error)

__all__ = ["BUSY_TIMEOUT_MS", "STORAGE_ERRORS", "Database", "open_database"]

log = get_logger(__name__)


def open_database(
    path: Path,
    *,
    migrations: Sequence[Migration] = MIGRATIONS,
    now: Clock = system_now,
    quick_check: bool = True,
    read_only: bool = False,
) -> Database:
    """Open (creating with mode 0600) ``state.db``, apply the PRAGMAs, quick-check it (it reads every page) and migrate
    it. ``read_only=True`` never creates, migrates or writes: a missing or empty file is a ``DatabaseError``."""
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
        apply_pragmas(db)
        if quick_check:
            problems = [row[0] for row in db.query("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise DatabaseError(f"{path} failed its quick check ({problems[0]}); run: automaton-min doctor")
        migrate(db, migrations, now)
    except BaseException as exc:
        if connection is not None:
            connection.close()
        if isinstance(exc, STORAGE_ERRORS):  # the disk refuses writes: the file itself may be fine
            raise DatabaseError(f"cannot write {path} ({describe_error(exc)}): the disk may be full or read-only; "
                                "free some space on it (df -h) and start again") from None
        if isinstance(exc, apsw.Error):  # damaged file, unreadable schema_version, ...: one line, not a raw apsw error
            raise DatabaseError(f"{path} cannot be opened as a database ({describe_error(exc)}); "
                                "run: automaton-min doctor") from None
        raise
    log.debug("opened database", extra={"path": str(path), "quick_check": quick_check})
    return db


def _open_read_only(path: Path) -> Database:
    if not path.exists():
        raise DatabaseError(f"{path} is missing; run: automaton-min setup (it creates the database)")
    if path.stat().st_size == 0:
        raise DatabaseError(f"{path} is empty (0 bytes); "
                            "restore it from a backup, or move it aside and run setup again")
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
        raise DatabaseError(f"{path} cannot be opened as a database ({describe_error(exc)}); "
                            "run: automaton-min doctor") from None
    log.debug("opened database", extra={"path": str(path), "read_only": True})
    return db

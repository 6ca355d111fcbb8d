"""Atomic, permission-aware file writes and permission checks."""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def atomic_write(path: Path, data: bytes, mode: int = 0o600, *, replace: bool = True) -> None:
    """Write ``data`` to ``path`` through a temp file (``mode`` set before the first byte), fsync and rename; with
    ``replace=False`` an existing file stays and ``FileExistsError`` is raised."""
    path = Path(path)
    tmp_name = f"{path.parent}/.{path.name}.{os.urandom(8).hex()}.tmp"  # no tempfile: the spawner imports this
    fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if replace:
            os.replace(tmp_name, path)
        else:
            os.link(tmp_name, path)
            os.unlink(tmp_name)
        tmp_name = None
        fsync_dir(path.parent)
    finally:
        if tmp_name is not None and os.path.exists(tmp_name):
            os.unlink(tmp_name)


def fsync_dir(directory: Path) -> None:
    """Flush a directory entry so a rename survives power loss."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_mode(path: Path) -> int:
    """The permission bits of ``path`` (e.g. ``0o600``)."""
    return stat.S_IMODE(os.stat(path).st_mode)


def open_to_others(path: Path) -> bool:
    """True when group or others have any access to ``path``."""
    return bool(file_mode(path) & 0o077)


@contextmanager
def held_exclusively(path: str | Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created 0600), waited for: holders in any process or thread take turns
    (separate opens conflict, even in one process, so a holder must not take it again)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)

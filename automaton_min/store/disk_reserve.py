"""Room to save turns when a command fills the disk: a reserve file in the home, given up when space runs out (README:
Security). The runtime calls ``check`` after each command or file write in local mode; the reserve comes back once
three times its size is free again.
"""

from __future__ import annotations

import os
from pathlib import Path

from automaton_min.log import get_logger
from automaton_min.trees import largest

log = get_logger(__name__)

RESERVE_NAME = ".disk-reserve"
RESERVE_BYTES = 4 << 20
LOW_INODES = 64  # fewer free than this, and the disk counts as full: SQLite and the runtime must create files


def _mb(size: int) -> str:
    return f"{size / (1 << 20):.1f} MB"


class DiskReserve:
    """The reserve file of one home, and the look at free space after each command."""

    def __init__(self, home: Path, workspace: Path, size: int = RESERVE_BYTES) -> None:
        self.home = Path(home)
        self.workspace = Path(workspace)
        self.size = size
        self.path = self.home / RESERVE_NAME
        self.kept = False  # only the running service keeps one (start)

    def space(self) -> tuple[int, int | None]:
        """What an unprivileged writer may still use on the home's filesystem: bytes, and files (None where the
        filesystem does not count them)."""
        stats = os.statvfs(self.home)
        return stats.f_bavail * stats.f_frsize, stats.f_favail if stats.f_files else None

    def free_bytes(self) -> int:
        return self.space()[0]

    def start(self) -> bool:
        """From now on keep the reserve (``automaton-min run``); whether it is held."""
        self.kept = True
        return self.keep()

    @property
    def held(self) -> bool:
        return self.path.exists()

    def keep(self) -> bool:
        """Make the reserve when it is missing and three times its size is free; whether it is held now."""
        if self.held:
            return True
        if self.size <= 0 or self.free_bytes() < 3 * self.size:
            return False
        partial = self.path.with_name(RESERVE_NAME + ".partial")
        try:
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                # Blocks allocated, nothing written: the filesystem holds them (st_blocks) without an SD card's
                # writes (glibc writes them only where the filesystem cannot allocate).
                os.posix_fallocate(fd, 0, self.size)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(partial, self.path)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            log.warning("the disk reserve could not be made", extra={"path": str(self.path), "error": str(exc)})
            return False
        return True

    def release(self) -> bool:
        """Give the reserve's room back to the filesystem; whether there was one."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def check(self) -> str | None:
        """After a command: the note for the agent when the disk is full (the reserve is released then), else
        None (and the reserve is remade when there is room)."""
        try:
            free, inodes = self.space()
        except OSError:
            return None
        no_inodes = inodes is not None and inodes < LOW_INODES
        if free >= self.size and not no_inodes:
            if self.kept:
                self.keep()
            return None
        released = self.release()
        biggest = largest(self.workspace, 3) if self.workspace.is_dir() else []
        listing = ", ".join(f"{name} ({_mb(size)})" for name, size in biggest) or "nothing big"
        log.warning("the disk holding the home is full", extra={
            "free_bytes": free, "reserve_released": released, "biggest": [name for name, _ in biggest]})
        freed = (f"; the runtime released its {_mb(self.size)} reserve so your turns can still be saved"
                 if released else "")
        what = f"no room for new files ({inodes} inodes left: too many files)" if no_inodes else f"{_mb(free)} free"
        return (f"The disk holding your home is full ({what}{freed}). The biggest things in your "
                f"workspace: {listing}. Delete what you do not need: until then commands that write files fail"
                f"{'' if released else ', and your turns may not be saved'}.")

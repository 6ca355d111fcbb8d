"""Before ``run`` starts: the home, and the database wherever it lives, must be writable by this process.

The check tries the real thing (a file created and removed in each directory written to, existing files opened for
writing), so root without CAP_DAC_OVERRIDE, ACLs and read-only mounts are judged as the kernel judges them.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from automaton_min.errors import RuntimeFailure
from automaton_min.home import Home


class NotWritable(RuntimeFailure):
    """A directory or file the agent must write to refuses writes (exit 1, one line with the fix)."""


def require_writable(home: Home, database: Path) -> None:
    """Raise ``NotWritable`` naming the first directory or file this process cannot write, and the fix."""
    for directory in dict.fromkeys((home.root, database.parent)):
        try:
            fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=directory)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise NotWritable(f"the disk holding {directory} is full (no space or no inodes left, df -h and df -i "
                                  f"tell which): delete what is not needed there, then start again") from None
            raise NotWritable(
                f"{directory} is not writable ({exc.strerror}): the agent keeps its database and lock there; make it "
                f"writable by this user (chown $(id -un) {directory} && chmod 700 {directory}), or pass --home with a "
                "writable directory") from None
    for path in (database, home.root / "run.lock"):
        try:
            os.close(os.open(path, os.O_RDWR | os.O_CLOEXEC))
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise NotWritable(f"{path} is not writable ({exc.strerror}): make it writable by this user "
                              f"(chown $(id -un) {path} && chmod 600 {path})") from None

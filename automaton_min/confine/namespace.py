"""The fallback where Landlock is missing: an unprivileged user + mount namespace that hides the home.

The spawner enters a new user namespace (mapping only its own uid and gid) and a new
mount namespace, then covers the agent's home with an empty tmpfs and mounts the
workspace back in its place. Inside, the wallet, the config and the database do not
exist. The daemon's ``/proc/<pid>`` files stay closed because the daemon makes itself
non-dumpable (``protect_daemon``) and the namespace holds no capability over it.
What this method does not stop, and Landlock does: signals to the daemon.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 2, 4, 4096, 8192, 16384, 1 << 18
PR_SET_DUMPABLE = 4

_libc = None


def _c():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str | Path, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = (lambda v: None if v is None else str(v).encode())
    _check(_c().mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)),
           f"mount {target}")


def protect_daemon() -> None:
    """Make this process non-dumpable: no core files, and its /proc files need a capability it alone could grant."""
    _c().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def hide_home(home: Path, workspace: Path, staging: Path) -> None:
    """In a new user+mount namespace: ``home`` becomes an empty tmpfs holding only ``workspace``.

    ``staging`` is an empty directory outside the home (in the private temp dir) used to carry the workspace
    across while the home is covered.
    """
    uid, gid = os.geteuid(), os.getegid()
    _check(_c().unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(user, mount)")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    if home not in workspace.parents:
        _mount("tmpfs", home, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700,size=64k")
        return
    staging.mkdir(mode=0o700, exist_ok=True)
    _mount(str(workspace), staging, None, MS_BIND | MS_REC)
    _mount("tmpfs", home, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700,size=64k")
    inside = home / workspace.relative_to(home)
    inside.mkdir(mode=0o700, parents=True, exist_ok=True)
    _mount(str(staging), inside, None, MS_MOVE)

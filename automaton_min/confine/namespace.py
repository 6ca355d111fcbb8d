"""A private mount namespace for the spawner and its commands (README: Security): the home covered by an empty tmpfs
but for the workspace, and every mount read-only but the workspace and the private temp dir.

A read-only mount refuses what Landlock does not govern (chmod, chown, utime, setxattr) whatever the uid, so a command
run as root, or as the user owning the agent's files, changes no file outside. Unprivileged, the namespace comes with a
user namespace mapping only the spawner's own uid and gid; root without user namespaces takes a mount namespace alone.
Commands hold no capability to remount; a namespace of their own copies the mounts locked, read-only for good.
"""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path

from automaton_min.confine.libc import PR_SET_DUMPABLE, check, libc, prctl

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE, MS_RELATIME = (
    1024, 2048, 4096, 8192, 16384, 1 << 18, 1 << 21)
# statvfs flags -> the mount flags a remount inside a user namespace must keep (the kernel locks them)
_KEPT_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
               (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME))

def _mount(source: str | None, target: str | Path, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = (lambda v: None if v is None else str(v).encode())
    check(libc().mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)),
           f"mount {target}")


def protect_daemon() -> None:
    """Make this process non-dumpable: no core files, and its /proc files need a capability it alone could grant."""
    prctl(PR_SET_DUMPABLE, 0, "prctl(PR_SET_DUMPABLE)")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def private_mounts() -> str:
    """Move this process into a mount namespace of its own; which way: ``"user namespace"`` (a user namespace mapping
    only this uid and gid, with a mount namespace) or ``"mount namespace"`` (root, where no user namespace can be had).
    """
    uid, gid = os.geteuid(), os.getegid()
    try:
        check(libc().unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(user, mount)")
    except OSError:
        if uid != 0:
            raise
        check(libc().unshare(CLONE_NEWNS), "unshare(mount)")  # root's CAP_SYS_ADMIN, before capabilities are dropped
        way = "mount namespace"
    else:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
        way = "user namespace"
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    return way


def hide_home(home: Path, workspace: Path, staging: Path) -> None:
    """In this process's private mount namespace, ``home`` becomes an empty tmpfs holding only ``workspace`` (carried
    across by way of ``staging``, an empty directory outside the home)."""
    if home not in workspace.parents:
        _mount("tmpfs", home, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700,size=64k")
        return
    staging.mkdir(mode=0o700, exist_ok=True)
    _mount(str(workspace), staging, None, MS_BIND | MS_REC)
    _mount("tmpfs", home, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700,size=64k")
    inside = home / workspace.relative_to(home)
    inside.mkdir(mode=0o700, parents=True, exist_ok=True)
    _mount(str(staging), inside, None, MS_MOVE)


def bare_dev(devices: tuple[Path, ...], staging: Path) -> None:
    """Cover /dev with a tmpfs holding only ``devices`` (each the real node, bound in) and the /dev/fd links: Landlock's
    device list, for where no Landlock keeps a command run as root from the disks."""
    staging.mkdir(mode=0o700, exist_ok=True)
    _mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=16k")
    for device in devices:
        if device.parent == Path("/dev"):
            os.close(os.open(staging / device.name, os.O_CREAT | os.O_WRONLY, 0o600))
            _mount(str(device), staging / device.name, None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, staging / name)
    _mount(str(staging), "/dev", None, MS_MOVE)


def _mount_points() -> list[str]:
    """Every mount point of this mount namespace, parents before children."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            field = line.split()[4]
            points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field))
    return points


def read_only_except(writable: list[Path]) -> list[str]:
    """Make every mount read-only but ``writable`` (each bound onto itself first, so it is a mount of its own).

    Returns the mount points that could not be remounted (kernel views such as /proc may refuse)."""
    keep = [str(path) for path in writable]
    for path in keep:
        _mount(path, path, None, MS_BIND | MS_REC)
    refused = []
    for point in _mount_points():
        if any(point == path or point.startswith(path.rstrip("/") + "/") for path in keep):
            continue
        try:
            flags = os.statvfs(point).f_flag
            locked = sum(mount_flag for st_flag, mount_flag in _KEPT_FLAGS if flags & st_flag)
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | locked)
        except FileNotFoundError:
            continue  # covered by a mount made here (the home's tmpfs, /dev's): out of every command's reach
        except OSError:
            refused.append(point)
    return refused

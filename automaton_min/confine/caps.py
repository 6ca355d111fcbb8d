"""Dropping every capability: a command run as root keeps its uid but loses root's powers, which step around the
kernel's ordinary checks (``CAP_SYS_PTRACE`` reads another process's ``/proc`` files, ``CAP_DAC_OVERRIDE`` ignores
file modes). The bounding set is emptied too where allowed; with no_new_privs nothing executed gains one back.
"""

from __future__ import annotations

import ctypes

from automaton_min.confine.libc import check, libc

PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return 63


def drop_all() -> None:
    """Empty the ambient, bounding, effective, permitted and inheritable sets of this process."""
    c = libc()
    c.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(_last_cap() + 1):
        c.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EPERM without CAP_SETPCAP: then there was nothing to drop
    header, data = _Header(_CAPABILITY_VERSION_3, 0), (_Data * 2)()
    check(c.capset(ctypes.byref(header), data), "capset")

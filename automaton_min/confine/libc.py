"""The C library for the few system calls confinement needs (and the heap's trim), loaded once; errno turned into
``OSError``."""

from __future__ import annotations

import ctypes
import os
from functools import cache

PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 4, 38, 36


@cache
def libc() -> ctypes.CDLL:
    library = ctypes.CDLL(None, use_errno=True)
    library.syscall.restype = ctypes.c_long
    return library


def check(result: int, what: str) -> int:
    """``result`` of a C call; a negative one raises ``OSError`` with the call's errno and ``what``."""
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def prctl(option: int, value: int, what: str) -> None:
    check(libc().prctl(option, value, 0, 0, 0), what)


def trim_heap() -> None:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim``), as a process goes idle."""
    getattr(libc(), "malloc_trim", lambda pad: 0)(0)

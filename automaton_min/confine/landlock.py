"""Landlock through its three system calls (Linux >= 5.13), with ctypes alone; their numbers are the generic table's.

A ruleset names the accesses it handles and, per directory or file, which stay allowed beneath it; a restricted
process and its descendants are refused every other handled access and cannot ptrace outside the domain. From ABI 6
the domain is also scoped: no signals to, or abstract UNIX sockets with, processes outside it.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections import namedtuple
from pathlib import Path

from automaton_min.confine.libc import PR_SET_NO_NEW_PRIVS, check, libc, prctl

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1

# File-system access rights, in ABI order.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the rights a rule on a non-directory may carry
READ_ONLY = EXECUTE | READ_FILE | READ_DIR
READ_WRITE_DEVICE = READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV

class LandlockError(OSError):
    """Landlock is missing, disabled, or refused a rule."""


def _syscall():
    return libc().syscall


def _check(result: int, what: str) -> int:
    try:
        return check(result, what)
    except OSError as exc:
        raise LandlockError(exc.errno, exc.strerror) from None


def set_no_new_privs() -> None:
    """From now on nothing this process executes gains privileges (setuid bits and file capabilities are ignored)."""
    prctl(PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")


def abi_version() -> int:
    """The kernel's Landlock ABI version, or 0 when it has none (too old, or Landlock not enabled at boot)."""
    try:
        result = _syscall()(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(result), 0)


def handled_fs(abi: int) -> int:
    """Every file-system right this ABI knows: all of them are governed, so none is left open by omission."""
    return _FS_BY_ABI.get(abi, (1 << 16) - 1) if abi > 0 else 0


class Rule(namedtuple("Rule", "path access")):
    """``access`` stays allowed at and beneath ``path`` (a directory, or a single file)."""

    __slots__ = ()


class Ruleset:
    """An open Landlock ruleset: add rules, then ``restrict_self`` (as often as wanted, each call nests a layer)."""

    def __init__(self, abi: int, *, scope: bool = True) -> None:
        if abi < 1:
            raise LandlockError(38, "this kernel has no Landlock")
        self.abi = abi
        self.handled = handled_fs(abi)
        self.scoped = (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if scope and abi >= 6 else 0
        if self.scoped:
            attr = struct.pack("=QQQ", self.handled, 0, self.scoped)
        else:
            attr = struct.pack("=Q", self.handled)
        buffer = ctypes.create_string_buffer(attr, len(attr))
        self.fd = _check(_syscall()(SYS_CREATE_RULESET, buffer, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)),
                         "landlock_create_ruleset")

    def allow(self, rule: Rule) -> bool:
        """Add ``rule``; False when its path does not exist (nothing to allow)."""
        try:
            fd = os.open(rule.path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            access = rule.access & self.handled
            if not os.path.isdir(rule.path):
                access &= FILE_ONLY
            attr = struct.pack("=Qi", access, fd)  # struct landlock_path_beneath_attr is packed: 12 bytes
            buffer = ctypes.create_string_buffer(attr, len(attr))
            _check(_syscall()(SYS_ADD_RULE, ctypes.c_int(self.fd), ctypes.c_int(RULE_PATH_BENEATH), buffer,
                              ctypes.c_uint32(0)), f"landlock_add_rule({rule.path})")
        finally:
            os.close(fd)
        return True

    def restrict_self(self) -> None:
        """Enter the ruleset's domain (a new nested layer). Sets no_new_privs first, as Landlock requires."""
        set_no_new_privs()
        _check(_syscall()(SYS_RESTRICT_SELF, ctypes.c_int(self.fd), ctypes.c_uint32(0)), "landlock_restrict_self")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

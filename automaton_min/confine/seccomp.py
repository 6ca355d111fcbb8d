"""A seccomp filter (classic BPF assembled here, installed with ctypes) against what Landlock leaves open.

Beyond README (Security): ``socketcall`` is refused whole (its arguments are behind a pointer), and a datagram
``socketpair`` (connected, it can still ``sendto`` a named one). Per protected pid, ``kill`` of its group and of -1,
``F_SETOWN_EX`` and ``SIOCSPGRP`` are refused too; ``pidfd_send_signal`` answers ENOSYS (a pidfd cannot be traced to
its process; callers fall back to ``kill``). Pids compare as a ``pid_t``, the low 32 bits. A process group the daemon
is in without leading it must be passed too. The filter is inherited across fork and exec; nothing removes it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import sys
from collections.abc import Collection
from collections import namedtuple
from pathlib import Path

from automaton_min.confine.libc import PR_SET_NO_NEW_PRIVS, check, libc, prctl

REFUSES = ("AF_UNIX sockets (socket, datagram socketpair, socketcall), io_uring, ptrace, pidfd_getfd, "
           "SysV IPC and keyrings, signals to the agent's own processes, and system calls of a foreign ABI")

PR_GET_SECCOMP, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 21, 22, 2
ACTIONS_AVAIL = Path("/proc/sys/kernel/seccomp/actions_avail")

RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
LOAD_WORD, AND, JUMP_IF_EQUAL, JUMP_IF_ANY_BIT, RETURN = 0x20, 0x54, 0x15, 0x45, 0x06

# struct seccomp_data: int nr, u32 arch, u64 instruction_pointer, u64 args[6]; little-endian, so an
# argument's low 32 bits come first.
NR, ARCH, ARG0_LOW, ARG1_LOW, ARG2_LOW = 0, 4, 16, 24, 32
LOW_WORD = 0xFFFFFFFF
IO_URING = (425, 426, 427)  # io_uring_setup, io_uring_enter, io_uring_register: one number on every arch
PIDFD_SEND_SIGNAL, PIDFD_OPEN, PIDFD_GETFD = 424, 434, 438  # one number on every arch too
F_SETOWN, F_SETOWN_EX = 8, 15  # fcntl commands: the process (pid) or group (-pgid) that gets the file's signals
FIOSETOWN, SIOCSPGRP = 0x8901, 0x8902  # the same for a socket, by ioctl, with the pid behind a pointer
MAX_PROTECTED = 4  # the daemon and the spawner need two; each costs three comparisons (jumps reach 255 ahead)
X32_SYSCALL_BIT = 0x40000000
SOCK_TYPE_MASK = 0xF  # what is left of socket()'s type without SOCK_NONBLOCK and SOCK_CLOEXEC


class SeccompUnavailable(OSError):
    """This machine or kernel cannot have the filter, or the kernel refused it."""


class Arch(namedtuple("Arch", "name audit socket socketpair ptrace kill tkill tgkill rt_sigqueueinfo rt_tgsigqueueinfo "
                      "prlimit64 fcntl ioctl fcntl64 socketcall shared_with_the_host has_x32",
                      defaults=(None, None, (), False))):
    """A system-call ABI: its AUDIT_ARCH value and the numbers the filter looks at. ``fcntl64``: 32-bit ABIs' fcntl
    with 64-bit locks, the one their libc calls; ``shared_with_the_host``: SysV IPC and keyrings, the host's
    namespaces, not the command's; ``has_x32``: x32 calls arrive as AUDIT_ARCH_X86_64 with X32_SYSCALL_BIT set."""

    __slots__ = ()


ARCHES = {arch.name: arch for arch in (
    Arch("x86_64", 0xC000003E, socket=41, socketpair=53, ptrace=101, has_x32=True,
         kill=62, tkill=200, tgkill=234, rt_sigqueueinfo=129, rt_tgsigqueueinfo=297, prlimit64=302, fcntl=72,
         ioctl=16, shared_with_the_host=(29, 30, 31, 64, 65, 66, 67, 68, 69, 70, 71, 220, 248, 249, 250)),
    # aarch64 and riscv64 share the generic table.
    Arch("aarch64", 0xC00000B7, socket=198, socketpair=199, ptrace=117,
         kill=129, tkill=130, tgkill=131, rt_sigqueueinfo=138, rt_tgsigqueueinfo=240, prlimit64=261, fcntl=25,
         ioctl=29, shared_with_the_host=(*range(186, 198), 217, 218, 219)),
    Arch("riscv64", 0xC00000F3, socket=198, socketpair=199, ptrace=117,
         kill=129, tkill=130, tgkill=131, rt_sigqueueinfo=138, rt_tgsigqueueinfo=240, prlimit64=261, fcntl=25,
         ioctl=29, shared_with_the_host=(*range(186, 198), 217, 218, 219)),
    Arch("arm", 0x40000028, socket=281, socketpair=288, ptrace=26, socketcall=102,
         kill=37, tkill=238, tgkill=268, rt_sigqueueinfo=178, rt_tgsigqueueinfo=363, prlimit64=369, fcntl=55,
         fcntl64=221, ioctl=54, shared_with_the_host=(*range(298, 313), 420)),
    Arch("i386", 0x40000003, socket=359, socketpair=360, ptrace=26, socketcall=102,
         kill=37, tkill=238, tgkill=270, rt_sigqueueinfo=178, rt_tgsigqueueinfo=335, prlimit64=340, fcntl=55,
         fcntl64=221, ioctl=54, shared_with_the_host=(117, *range(393, 403), 420, 286, 287, 288)),
)}


def arch_for(machine: str, pointer_bytes: int) -> Arch:
    """The ABI of a process with ``pointer_bytes`` pointers on ``machine`` (``uname -m``, the kernel's own)."""
    machine, wide = machine.lower(), pointer_bytes == 8
    # A 32-bit userland on a 64-bit kernel (Raspberry Pi OS) calls through the 32-bit ABI.
    if machine in ("x86_64", "amd64", "i386", "i486", "i586", "i686"):
        return ARCHES["x86_64" if wide else "i386"]
    if machine in ("aarch64", "arm64") or machine.startswith("arm"):
        return ARCHES["aarch64" if wide else "arm"]
    if machine == "riscv64" and wide:
        return ARCHES["riscv64"]
    raise SeccompUnavailable(errno.ENOSYS, f"no seccomp filter for {machine} with {pointer_bytes * 8}-bit pointers")


def native_arch() -> Arch:
    """The ABI this process makes its system calls through."""
    if sys.byteorder != "little":
        raise SeccompUnavailable(errno.ENOSYS, "no seccomp filter for big-endian machines")
    arch = arch_for(os.uname().machine, ctypes.sizeof(ctypes.c_void_p))
    if arch.name == "i386" and ctypes.alignment(ctypes.c_longlong) == 8:  # i386 aligns long long to 4; x32 to 8
        raise SeccompUnavailable(errno.ENOSYS, "no seccomp filter for the x32 ABI")
    return arch


def _assemble(lines: list) -> list[tuple[int, int, int, int]]:
    """``(code, jt, jf, k)`` instructions, a string among them marks a label; jt and jf may name a label."""
    labels, instructions = {}, []
    for line in lines:
        if isinstance(line, str):
            labels[line] = len(instructions)
        else:
            instructions.append(line)

    def offset(target: int | str, index: int) -> int:
        if isinstance(target, int):
            return target
        skip = labels[target] - index - 1
        if not 0 <= skip <= 255:
            raise ValueError(f"jump to {target!r} out of range")
        return skip

    return [(code, offset(jt, i), offset(jf, i), int(k)) for i, (code, jt, jf, k) in enumerate(instructions)]


def _checked_pids(protected: Collection[int]) -> list[int]:
    """``protected`` checked (positive pids, at most ``MAX_PROTECTED`` of them) and without repeats."""
    pids = list(dict.fromkeys(protected))
    for pid in pids:
        if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= 0x7FFFFFFF:
            raise ValueError(f"not a pid to protect: {pid!r}")
    if len(pids) > MAX_PROTECTED:
        raise ValueError(f"at most {MAX_PROTECTED} pids can be protected, not {len(pids)}")
    return pids


def program(arch: Arch, protected: Collection[int] = ()) -> list[tuple[int, int, int, int]]:
    """The filter for ``arch`` as BPF instructions; signals cannot reach ``protected`` (README: Security)."""
    pids = _checked_pids(protected)
    lines: list = [
        (LOAD_WORD, 0, 0, ARCH),
        (JUMP_IF_EQUAL, 0, "enosys", arch.audit),
        (LOAD_WORD, 0, 0, NR),
    ]
    if arch.has_x32:
        lines.append((JUMP_IF_ANY_BIT, "enosys", 0, X32_SYSCALL_BIT))
    lines += [
        (JUMP_IF_EQUAL, "socket", 0, arch.socket),
        (JUMP_IF_EQUAL, "socketpair", 0, arch.socketpair),
        (JUMP_IF_EQUAL, "eperm", 0, arch.ptrace),
        (JUMP_IF_EQUAL, "eperm", 0, PIDFD_GETFD),
        *[(JUMP_IF_EQUAL, "enosys", 0, number) for number in (*IO_URING, *arch.shared_with_the_host)],
    ]
    if arch.socketcall is not None:
        lines.append((JUMP_IF_EQUAL, "enosys", 0, arch.socketcall))
    if pids:
        by_first_argument = (arch.tkill, arch.tgkill, arch.rt_sigqueueinfo, arch.rt_tgsigqueueinfo, PIDFD_OPEN,
                             arch.prlimit64)
        lines += [
            (JUMP_IF_EQUAL, "kill", 0, arch.kill),
            *[(JUMP_IF_EQUAL, "pid", 0, number) for number in by_first_argument],
            *[(JUMP_IF_EQUAL, "fcntl", 0, number) for number in (arch.fcntl, arch.fcntl64) if number is not None],
            (JUMP_IF_EQUAL, "ioctl", 0, arch.ioctl),
            (JUMP_IF_EQUAL, "enosys", 0, PIDFD_SEND_SIGNAL),
        ]
    lines += [
        (RETURN, 0, 0, RET_ALLOW),
        "socket",
        (LOAD_WORD, 0, 0, ARG0_LOW),
        (JUMP_IF_EQUAL, "eafnosupport", "allow", socket.AF_UNIX),
        "socketpair",
        (LOAD_WORD, 0, 0, ARG0_LOW),
        (JUMP_IF_EQUAL, 0, "allow", socket.AF_UNIX),
        (LOAD_WORD, 0, 0, ARG1_LOW),
        (AND, 0, 0, SOCK_TYPE_MASK),
        # Only these two: AF_UNIX turns SOCK_RAW into SOCK_DGRAM.
        (JUMP_IF_EQUAL, "allow", 0, socket.SOCK_STREAM),
        (JUMP_IF_EQUAL, "allow", "eafnosupport", socket.SOCK_SEQPACKET),
    ]
    if pids:
        process = [(JUMP_IF_EQUAL, "eperm", 0, pid) for pid in pids]
        group = [(JUMP_IF_EQUAL, "eperm", 0, -pid & LOW_WORD) for pid in pids]
        lines += [
            "kill",  # a pid, -pgid, or -1 (every process the caller may signal), in a pid_t
            (LOAD_WORD, 0, 0, ARG0_LOW),
            (JUMP_IF_EQUAL, "eperm", "pid_or_group", -1 & LOW_WORD),
            "fcntl",
            (LOAD_WORD, 0, 0, ARG1_LOW),
            (JUMP_IF_EQUAL, "eperm", 0, F_SETOWN_EX),
            (JUMP_IF_EQUAL, 0, "allow", F_SETOWN),
            (LOAD_WORD, 0, 0, ARG2_LOW),  # a pid or -pgid, as an int
            "pid_or_group", *group, *process,
            (RETURN, 0, 0, RET_ALLOW),
            "pid",  # a pid_t: a thread group's (a process's) or, for tkill, a thread's id
            (LOAD_WORD, 0, 0, ARG0_LOW), *process,
            (RETURN, 0, 0, RET_ALLOW),
            "ioctl",
            (LOAD_WORD, 0, 0, ARG1_LOW),
            (JUMP_IF_EQUAL, "eperm", 0, FIOSETOWN),
            (JUMP_IF_EQUAL, "eperm", "allow", SIOCSPGRP),
        ]
    lines += [
        "allow", (RETURN, 0, 0, RET_ALLOW),
        "enosys", (RETURN, 0, 0, RET_ERRNO | errno.ENOSYS),
        "eperm", (RETURN, 0, 0, RET_ERRNO | errno.EPERM),
        "eafnosupport", (RETURN, 0, 0, RET_ERRNO | errno.EAFNOSUPPORT),
    ]
    return _assemble(lines)


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def install(protected: Collection[int] = ()) -> None:
    """Filter this thread and all it starts (after no_new_privs). Nothing filtered, this thread included, can signal
    ``protected`` (at most ``MAX_PROTECTED``, else ValueError) or every process (-1)."""
    instructions = program(native_arch(), protected)
    filters = (_SockFilter * len(instructions))(*instructions)
    fprog = _SockFprog(len(instructions), filters)
    try:
        prctl(PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")
        # prctl rather than seccomp(2): systemd's @system-service allows the one and not the other.
        check(libc().prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog),
                           ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl(PR_SET_SECCOMP)")
    except OSError as exc:
        raise SeccompUnavailable(exc.errno, exc.strerror) from None


def available() -> bool:
    """Whether ``install`` should work here (a known ABI, a kernel with seccomp filters), without installing."""
    try:
        native_arch()
        check(libc().prctl(PR_GET_SECCOMP, 0, 0, 0, 0), "prctl(PR_GET_SECCOMP)")
    except OSError:
        return False
    try:
        actions = ACTIONS_AVAIL.read_text().split()
    except OSError:  # before Linux 4.14 there is no list: PR_GET_SECCOMP answering has to do
        return True
    return {"allow", "errno"} <= set(actions)

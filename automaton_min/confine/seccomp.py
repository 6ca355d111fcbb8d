"""A seccomp filter, classic BPF assembled here and installed with ctypes, against what Landlock leaves open.

Without a UNIX socket of its own a command cannot reach a named or abstract socket (the
D-Bus bus, the systemd notify socket, an SSH or GPG agent), so the filter refuses
``socket(AF_UNIX)``, AF_UNIX datagram ``socketpair`` (a connected datagram socket can
still ``sendto`` any named one), ``socketcall`` (its arguments are behind a pointer) and
io_uring (which creates sockets without the socket call). It also refuses ``ptrace``, and
every call made through a foreign ABI (32-bit calls on a 64-bit kernel, x32), where the
numbers mean other things. Everything else is allowed. The filter is inherited across
fork and exec, and nothing can remove it.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from automaton_min.confine.libc import PR_SET_NO_NEW_PRIVS, check, libc, prctl

REFUSES = ("AF_UNIX sockets (socket, datagram socketpair, socketcall), io_uring, ptrace, "
           "and system calls of a foreign ABI")

PR_GET_SECCOMP, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 21, 22, 2
ACTIONS_AVAIL = Path("/proc/sys/kernel/seccomp/actions_avail")

RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
LOAD_WORD, AND, JUMP_IF_EQUAL, JUMP_IF_ANY_BIT, RETURN = 0x20, 0x54, 0x15, 0x45, 0x06

# struct seccomp_data: int nr, u32 arch, u64 instruction_pointer, u64 args[6]; little-endian, so an
# argument's low 32 bits come first.
NR, ARCH, ARG0_LOW, ARG1_LOW = 0, 4, 16, 24
IO_URING = (425, 426, 427)  # io_uring_setup, io_uring_enter, io_uring_register: one number on every arch
X32_SYSCALL_BIT = 0x40000000
SOCK_TYPE_MASK = 0xF  # what is left of socket()'s type without SOCK_NONBLOCK and SOCK_CLOEXEC


class SeccompUnavailable(OSError):
    """This machine or kernel cannot have the filter, or the kernel refused it."""


@dataclass(frozen=True)
class Arch:
    """A system-call ABI: its AUDIT_ARCH value and the numbers the filter looks at."""

    name: str
    audit: int
    socket: int
    socketpair: int
    ptrace: int
    socketcall: int | None = None
    has_x32: bool = False  # x32 calls arrive as AUDIT_ARCH_X86_64 with X32_SYSCALL_BIT set


ARCHES = {arch.name: arch for arch in (
    Arch("x86_64", 0xC000003E, socket=41, socketpair=53, ptrace=101, has_x32=True),
    Arch("aarch64", 0xC00000B7, socket=198, socketpair=199, ptrace=117),
    Arch("riscv64", 0xC00000F3, socket=198, socketpair=199, ptrace=117),
    Arch("arm", 0x40000028, socket=281, socketpair=288, ptrace=26, socketcall=102),
    Arch("i386", 0x40000003, socket=359, socketpair=360, ptrace=26, socketcall=102),
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
    arch = arch_for(platform.machine(), ctypes.sizeof(ctypes.c_void_p))
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


def program(arch: Arch) -> list[tuple[int, int, int, int]]:
    """The filter for ``arch`` as BPF instructions."""
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
        *[(JUMP_IF_EQUAL, "enosys", 0, number) for number in IO_URING],
    ]
    if arch.socketcall is not None:
        lines.append((JUMP_IF_EQUAL, "enosys", 0, arch.socketcall))
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


def install() -> None:
    """Filter this thread and everything it starts from now on; sets no_new_privs first, as the kernel requires."""
    instructions = program(native_arch())
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

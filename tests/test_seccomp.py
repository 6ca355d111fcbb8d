"""The seccomp filter: real child processes with and without it try what it refuses and what it allows, and the
BPF program of every supported architecture runs through a small interpreter.

Run as a script (``test_seccomp.py install|plain <socket path> <abstract name>``) this file is the child: it
installs the filter or not, tries every probe, and prints the outcomes as JSON.
"""

from __future__ import annotations

import ctypes
import errno
import json
import mmap
import os
import platform
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from automaton_min.confine import seccomp

PTRACE_TRACEME = 0
SOURCE_ROOT = Path(__file__).resolve().parents[1]
X86_64 = seccomp.native_arch().name == "x86_64" if seccomp.available() else False


def _libc() -> ctypes.CDLL:
    library = ctypes.CDLL(None, use_errno=True)
    library.syscall.restype = ctypes.c_long
    return library


def _syscall(*args: int | ctypes.Array) -> int:
    result = _libc().syscall(*args)
    if result < 0:
        raise OSError(ctypes.get_errno(), "syscall")
    return result


def _in_fork(call) -> None:
    """``call`` (which returns 0 or an errno) in a forked child, so a trace or a crash stays there."""
    pid = os.fork()
    if pid == 0:
        os._exit(call())
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise RuntimeError(f"signal {os.WTERMSIG(status)}")
    if os.WEXITSTATUS(status):
        raise OSError(os.WEXITSTATUS(status), "in fork")


def _ptrace_traceme() -> int:
    return 0 if _libc().ptrace(PTRACE_TRACEME, 0, None, None) == 0 else ctypes.get_errno()


def _i386_getpid() -> int:
    """getpid through the 32-bit ABI (``int 0x80``, eax = 20) from 64-bit code: 0 when it returns our pid."""
    machine_code = bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3])  # mov eax, 20; int 0x80; ret
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(machine_code)
    function = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
    result = function()
    return 0 if result == os.getpid() else -result


def _connect(address: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(address)


def _socketpair_passes_data(kind: int) -> None:
    left, right = socket.socketpair(socket.AF_UNIX, kind)
    with left, right:
        left.sendall(b"ping")
        assert right.recv(4) == b"ping"


def _open_close(family: int, kind: int, protocol: int = 0) -> None:
    socket.socket(family, kind, protocol).close()


def _inet_bind() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))


def _io_uring_setup() -> None:
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    os.close(_syscall(425, 1, params))


def _grandchild(code: str) -> str:
    """The outcome of ``code`` in a Python started by a shell started by this process."""
    script = (f"import errno, socket\ntry:\n    {code}\n"
              "except OSError as e:\n    print(errno.errorcode[e.errno])\nelse:\n    print('ok')")
    shell = subprocess.run(["/bin/sh", "-c", '"$0" -c "$1"', sys.executable, script], capture_output=True,
                           text=True, timeout=30, check=True)
    return shell.stdout.strip()


def probes(path: str, abstract: str) -> dict:
    """Every attempt, by name; each returns None (or "ok") when it worked, another string for its outcome."""
    dgram_flags = socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
    attempts = {
        "unix_stream": lambda: _open_close(socket.AF_UNIX, socket.SOCK_STREAM),
        "unix_dgram": lambda: _open_close(socket.AF_UNIX, socket.SOCK_DGRAM),
        "unix_dgram_flags": lambda: _open_close(socket.AF_UNIX, dgram_flags),
        "connect_path": lambda: _connect(path),
        "connect_abstract": lambda: _connect("\0" + abstract),
        "socketpair_stream": lambda: _socketpair_passes_data(socket.SOCK_STREAM),
        "socketpair_seqpacket": lambda: _socketpair_passes_data(socket.SOCK_SEQPACKET),
        "socketpair_dgram": lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM),
        "socketpair_dgram_flags": lambda: socket.socketpair(socket.AF_UNIX, dgram_flags),
        "socketpair_raw": lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_RAW),  # a datagram pair too
        "inet_bind": _inet_bind,
        "netlink": lambda: _open_close(socket.AF_NETLINK, socket.SOCK_RAW, 0),  # NETLINK_ROUTE
        "ptrace": lambda: _in_fork(_ptrace_traceme),
        "io_uring": _io_uring_setup,
        "grandchild_unix": lambda: _grandchild("socket.socket(socket.AF_UNIX)"),
        "grandchild_inet": lambda: _grandchild("socket.socket(socket.AF_INET).bind(('127.0.0.1', 0))"),
    }
    if X86_64:
        attempts["x32_getpid"] = lambda: _syscall(seccomp.X32_SYSCALL_BIT | 39)
        attempts["i386_getpid"] = lambda: _in_fork(_i386_getpid)
    return attempts


def outcome(attempt) -> str:
    try:
        result = attempt()
    except OSError as exc:
        return errno.errorcode[exc.errno]
    except RuntimeError as exc:
        return str(exc)
    return result if isinstance(result, str) else "ok"


REFUSED = {
    "unix_stream": "EAFNOSUPPORT", "unix_dgram": "EAFNOSUPPORT", "unix_dgram_flags": "EAFNOSUPPORT",
    "connect_path": "EAFNOSUPPORT", "connect_abstract": "EAFNOSUPPORT",
    "socketpair_dgram": "EAFNOSUPPORT", "socketpair_dgram_flags": "EAFNOSUPPORT", "socketpair_raw": "EAFNOSUPPORT",
    "ptrace": "EPERM", "io_uring": "ENOSYS", "grandchild_unix": "EAFNOSUPPORT",
    "x32_getpid": "ENOSYS", "i386_getpid": "ENOSYS",
}
ALLOWED = ("socketpair_stream", "socketpair_seqpacket", "inet_bind", "netlink", "grandchild_inet")
# Refused by some kernels on their own, with or without the filter.
KERNEL_OPTIONAL = {"x32_getpid": "x32 system calls", "i386_getpid": "32-bit emulation", "io_uring": "io_uring"}

pytestmark = pytest.mark.skipif(not seccomp.available(), reason="no seccomp filter on this machine or kernel")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> tuple[dict, dict]:
    """(plain, filtered): each probe's outcome in a child without and with the filter, against real listeners."""
    path = str(tmp_path_factory.mktemp("seccomp") / "listener.sock")
    abstract = f"automaton-min-seccomp-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX) as path_listener, socket.socket(socket.AF_UNIX) as abstract_listener:
        path_listener.bind(path)
        path_listener.listen(8)
        abstract_listener.bind("\0" + abstract)
        abstract_listener.listen(8)
        env = {**os.environ, "PYTHONPATH": str(SOURCE_ROOT)}
        runs = [subprocess.run([sys.executable, __file__, mode, path, abstract], capture_output=True, text=True,
                               env=env, timeout=120, check=True) for mode in ("plain", "install")]
    plain, filtered = (json.loads(run.stdout) for run in runs)
    return plain, filtered


def probe_names() -> list[str]:
    return list(probes("", ""))


@pytest.mark.parametrize("name", [name for name in probe_names() if name in REFUSED])
def test_a_plain_process_can_do_what_the_filter_refuses(name, outcomes):
    plain, _ = outcomes
    if name in KERNEL_OPTIONAL and plain[name] != "ok":
        pytest.skip(f"this kernel has no {KERNEL_OPTIONAL[name]} ({plain[name]})")
    assert plain[name] == "ok"


@pytest.mark.parametrize("name", [name for name in probe_names() if name in REFUSED])
def test_the_filter_refuses(name, outcomes):
    plain, filtered = outcomes
    if plain[name].startswith("signal"):
        pytest.skip(f"this kernel has no {KERNEL_OPTIONAL[name]} ({plain[name]})")
    assert filtered[name] == REFUSED[name]


@pytest.mark.parametrize("name", ALLOWED)
def test_the_filter_allows(name, outcomes):
    plain, filtered = outcomes
    assert plain[name] == filtered[name] == "ok"


def test_every_probe_is_expected_one_way_or_the_other():
    assert set(probe_names()) <= set(REFUSED) | set(ALLOWED)


def test_available_and_described():
    assert seccomp.available()
    assert "AF_UNIX" in seccomp.REFUSES and "\n" not in seccomp.REFUSES


@pytest.mark.parametrize(("machine", "pointer_bytes", "expected"), [
    ("x86_64", 8, "x86_64"), ("x86_64", 4, "i386"), ("i686", 4, "i386"),
    ("aarch64", 8, "aarch64"), ("aarch64", 4, "arm"), ("armv7l", 4, "arm"), ("armv8l", 4, "arm"),
    ("riscv64", 8, "riscv64"),
])
def test_arch_for_a_machine_and_pointer_size(machine, pointer_bytes, expected):
    assert seccomp.arch_for(machine, pointer_bytes).name == expected


@pytest.mark.parametrize("machine", ["mips64", "ppc64le", "s390x", "loongarch64"])
def test_an_unknown_machine_is_unavailable(machine):
    with pytest.raises(seccomp.SeccompUnavailable) as raised:
        seccomp.arch_for(machine, 8)
    assert isinstance(raised.value, OSError) and machine in str(raised.value)


def test_the_native_arch_matches_this_interpreter():
    expected = {"x86_64": "x86_64", "aarch64": "aarch64"}.get(platform.machine())
    if expected is None or ctypes.sizeof(ctypes.c_void_p) != 8:
        pytest.skip("checked on 64-bit x86_64 and aarch64 only")
    assert seccomp.native_arch().name == expected


# The BPF program of every architecture, run on seccomp_data built here.

def run_filter(arch: seccomp.Arch, nr: int, *args: int, audit: int | None = None) -> int:
    data = struct.pack("<iIQ6Q", nr, arch.audit if audit is None else audit, 0, *args, *[0] * (6 - len(args)))
    instructions, accumulator, index = seccomp.program(arch), 0, 0
    while True:
        code, jt, jf, k = instructions[index]
        index += 1
        if code == seccomp.LOAD_WORD:
            accumulator = struct.unpack_from("<I", data, k)[0]
        elif code == seccomp.AND:
            accumulator &= k
        elif code == seccomp.JUMP_IF_EQUAL:
            index += jt if accumulator == k else jf
        elif code == seccomp.JUMP_IF_ANY_BIT:
            index += jt if accumulator & k else jf
        elif code == seccomp.RETURN:
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")


ALLOW = seccomp.RET_ALLOW
ENOSYS, EPERM = seccomp.RET_ERRNO | errno.ENOSYS, seccomp.RET_ERRNO | errno.EPERM
EAFNOSUPPORT = seccomp.RET_ERRNO | errno.EAFNOSUPPORT
ARCHES = list(seccomp.ARCHES.values())


@pytest.mark.parametrize("arch", ARCHES, ids=lambda arch: arch.name)
def test_program_sockets(arch):
    unix, inet, inet6, netlink = socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK
    stream, dgram, seqpacket = socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET
    flags = socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
    assert run_filter(arch, arch.socket, unix, stream) == EAFNOSUPPORT
    assert run_filter(arch, arch.socket, unix | 0xFFFFFFFF00000000, dgram) == EAFNOSUPPORT  # the kernel reads an int
    for family in (inet, inet6, netlink):
        assert run_filter(arch, arch.socket, family, dgram) == ALLOW
    for kind in (dgram, dgram | flags, socket.SOCK_RAW, socket.SOCK_RDM, 0):
        assert run_filter(arch, arch.socketpair, unix, kind) == EAFNOSUPPORT
    for kind in (stream, stream | flags, seqpacket, seqpacket | flags):
        assert run_filter(arch, arch.socketpair, unix, kind) == ALLOW
    assert run_filter(arch, arch.socketpair, inet, dgram) == ALLOW


@pytest.mark.parametrize("arch", ARCHES, ids=lambda arch: arch.name)
def test_program_refusals_and_the_rest(arch):
    assert run_filter(arch, arch.ptrace) == EPERM
    for number in (425, 426, 427):
        assert run_filter(arch, number) == ENOSYS
    if arch.socketcall is not None:
        assert run_filter(arch, arch.socketcall, 1) == ENOSYS
    for number in (0, 1, 102, 424, 428, 444):  # 102 is socketcall only where the arch has it
        if number != arch.socketcall:
            assert run_filter(arch, number) == ALLOW


@pytest.mark.parametrize("arch", ARCHES, ids=lambda arch: arch.name)
def test_program_refuses_every_call_of_a_foreign_abi(arch):
    for other in ARCHES:
        if other.audit != arch.audit:
            for number in (0, 39, arch.socket, 425):
                assert run_filter(arch, number, audit=other.audit) == ENOSYS


def test_program_refuses_x32_calls_on_x86_64_only():
    x86_64, aarch64 = seccomp.ARCHES["x86_64"], seccomp.ARCHES["aarch64"]
    assert run_filter(x86_64, seccomp.X32_SYSCALL_BIT | 39) == ENOSYS
    assert run_filter(x86_64, 39) == ALLOW
    assert run_filter(aarch64, seccomp.X32_SYSCALL_BIT | 39) == ALLOW


if __name__ == "__main__":
    mode, socket_path, abstract_name = sys.argv[1:]
    if mode == "install":
        seccomp.install()
    print(json.dumps({name: outcome(attempt) for name, attempt in probes(socket_path, abstract_name).items()}))

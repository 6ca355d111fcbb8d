"""The seccomp filter: real child processes with and without it try what it refuses and what it allows, and the
BPF program of every supported architecture runs through a small interpreter.

Run as a script (``test_seccomp.py install|plain <socket path> <abstract name>``) this file is the child: it
installs the filter or not, tries every probe, and prints the outcomes as JSON. As ``test_seccomp.py signals
install|plain <victim pid> <other pid>`` it tries every signal probe, with the victim and its own parent protected.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import mmap
import os
import platform
import resource
import socket
import struct
import subprocess
import sys
import threading
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


def _private_ipc(get: int, control: int, *args: int) -> None:
    """Make a private SysV IPC object (x86_64 numbers) and remove it at once (IPC_RMID)."""
    made = _syscall(get, 0, *args)  # IPC_PRIVATE
    _syscall(control, made, 0, 0)


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
        attempts["sysv_shm"] = lambda: _private_ipc(29, 31, 4096, 0o600)  # shmget, shmctl
        attempts["sysv_msg"] = lambda: _private_ipc(68, 71, 0o600)  # msgget, msgctl
        attempts["keyctl"] = lambda: _syscall(250, 0, -3, 0)  # KEYCTL_GET_KEYRING_ID of the session keyring
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
    "x32_getpid": "ENOSYS", "i386_getpid": "ENOSYS", "sysv_shm": "ENOSYS", "sysv_msg": "ENOSYS", "keyctl": "ENOSYS",
}
ALLOWED = ("socketpair_stream", "socketpair_seqpacket", "inet_bind", "netlink", "grandchild_inet")
# Refused by some kernels on their own, with or without the filter.
KERNEL_OPTIONAL = {"x32_getpid": "x32 system calls", "i386_getpid": "32-bit emulation", "io_uring": "io_uring"}

pytestmark = pytest.mark.skipif(not seccomp.available(), reason="no seccomp filter on this machine or kernel")


# Signals to protected processes. Signal 0 throughout: the kernel checks everything but sends nothing.

def _native_number(name: str) -> int:
    return getattr(seccomp.native_arch(), name)


def _signal_call(name: str, *args: int | ctypes.Array) -> None:
    _syscall(_native_number(name), *args)


def _queued_info() -> ctypes.Array:
    """A siginfo_t as sigqueue fills it (si_code SI_QUEUE): the kernel takes no other from a process."""
    info = ctypes.create_string_buffer(128)
    struct.pack_into("iii", info, 0, 0, 0, -1)  # si_signo, si_errno, si_code
    return info


def _pidfd_getfd_own() -> None:
    pidfd = os.pidfd_open(os.getpid())
    try:
        os.close(_syscall(seccomp.PIDFD_GETFD, pidfd, 0, 0))
    finally:
        os.close(pidfd)


def _pidfd_send_signal_through_proc(pid: int) -> None:
    """An open /proc/<pid> directory serves pidfd_send_signal as a pidfd would."""
    directory = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY)
    try:
        _syscall(seccomp.PIDFD_SEND_SIGNAL, directory, 0, None, 0)
    finally:
        os.close(directory)


def _set_owner(command: int, argument: int | bytes) -> None:
    """fcntl(``command``) on a pipe: who would get its SIGIO (not asked for: O_ASYNC stays off)."""
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(read_end, command, argument)
    finally:
        os.close(read_end)
        os.close(write_end)


def _set_socket_owner(request: int, pid: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock.fileno(), request, struct.pack("i", pid))


def _pidfd_open_close(pid: int) -> None:
    os.close(os.pidfd_open(pid))


def signal_probes(victim: int, other: int) -> dict:
    """Every signal attempt, by name, against ``victim`` (protected, leads its group), its parent (protected)
    and ``other`` (not protected, leads its group)."""
    me, parent, owner_ex = os.getpid(), os.getppid(), struct.pack("ii", 1, os.getpid())  # F_OWNER_PID, pid
    return {
        "kill_victim": lambda: os.kill(victim, 0),
        "kill_victim_group": lambda: os.kill(-victim, 0),
        "kill_everyone": lambda: os.kill(-1, 0),
        "kill_parent": lambda: os.kill(parent, 0),
        "kill_victim_high_bits": lambda: _signal_call("kill", victim | 0x5A5A5A5A_00000000, 0),  # read as a pid_t
        "tkill_victim": lambda: _signal_call("tkill", victim, 0),
        "tgkill_victim": lambda: _signal_call("tgkill", victim, victim, 0),
        "rt_sigqueueinfo_victim": lambda: _signal_call("rt_sigqueueinfo", victim, 0, _queued_info()),
        "rt_tgsigqueueinfo_victim": lambda: _signal_call("rt_tgsigqueueinfo", victim, victim, 0, _queued_info()),
        "pidfd_open_victim": lambda: _pidfd_open_close(victim),
        "pidfd_getfd": _pidfd_getfd_own,
        "pidfd_send_signal_proc": lambda: _pidfd_send_signal_through_proc(victim),
        "prlimit_victim": lambda: resource.prlimit(victim, resource.RLIMIT_NOFILE),
        "setown_victim": lambda: _set_owner(fcntl.F_SETOWN, victim),
        "setown_victim_group": lambda: _set_owner(fcntl.F_SETOWN, -victim),
        "setown_ex": lambda: _set_owner(seccomp.F_SETOWN_EX, owner_ex),
        "fiosetown": lambda: _set_socket_owner(seccomp.FIOSETOWN, me),
        "siocspgrp": lambda: _set_socket_owner(seccomp.SIOCSPGRP, me),
        "grandchild_kill_victim": lambda: _grandchild(f"__import__('os').kill({victim}, 0)"),
        "kill_other": lambda: os.kill(other, 0),
        "kill_other_group": lambda: os.kill(-other, 0),
        "kill_self": lambda: os.kill(me, 0),
        "kill_own_group": lambda: os.kill(0, 0),
        "tgkill_self": lambda: _signal_call("tgkill", me, threading.get_native_id(), 0),
        "pidfd_open_other": lambda: _pidfd_open_close(other),
        "prlimit_other": lambda: resource.prlimit(other, resource.RLIMIT_NOFILE),
        "setown_self": lambda: _set_owner(fcntl.F_SETOWN, me),
        "setown_other_group": lambda: _set_owner(fcntl.F_SETOWN, -other),
        "grandchild_kill_other": lambda: _grandchild(f"__import__('os').kill({other}, 0)"),
    }


SIGNAL_REFUSED = {
    "kill_victim": "EPERM", "kill_victim_group": "EPERM", "kill_everyone": "EPERM", "kill_parent": "EPERM",
    "kill_victim_high_bits": "EPERM", "tkill_victim": "EPERM", "tgkill_victim": "EPERM",
    "rt_sigqueueinfo_victim": "EPERM", "rt_tgsigqueueinfo_victim": "EPERM", "pidfd_open_victim": "EPERM",
    "pidfd_getfd": "EPERM", "pidfd_send_signal_proc": "ENOSYS", "prlimit_victim": "EPERM",
    "setown_victim": "EPERM", "setown_victim_group": "EPERM", "setown_ex": "EPERM", "fiosetown": "EPERM",
    "siocspgrp": "EPERM", "grandchild_kill_victim": "EPERM",
}
SIGNAL_ALLOWED = ("kill_other", "kill_other_group", "kill_self", "kill_own_group", "tgkill_self", "pidfd_open_other",
                  "prlimit_other", "setown_self", "setown_other_group", "grandchild_kill_other")


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


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"], start_new_session=True)  # leads a process group of its own


@pytest.fixture(scope="module")
def signal_outcomes() -> tuple[dict, dict]:
    """(plain, filtered): each signal probe's outcome in a child without and with the filter, against a victim (and
    the child's parent, this process) protected and another process not protected."""
    victim, other = _sleeper(), _sleeper()
    try:
        env = {**os.environ, "PYTHONPATH": str(SOURCE_ROOT)}
        runs = [subprocess.run([sys.executable, __file__, "signals", mode, str(victim.pid), str(other.pid)],
                               capture_output=True, text=True, env=env, timeout=120, check=True)
                for mode in ("plain", "install")]
        assert victim.poll() is None and other.poll() is None
    finally:
        for process in (victim, other):
            process.kill()
            process.wait()
    plain, filtered = (json.loads(run.stdout) for run in runs)
    return plain, filtered


@pytest.mark.parametrize("name", SIGNAL_REFUSED)
def test_a_plain_process_can_signal(name, signal_outcomes):
    plain, _ = signal_outcomes
    assert plain[name] == "ok"


@pytest.mark.parametrize("name", SIGNAL_REFUSED)
def test_the_filter_refuses_signals_to_protected_processes(name, signal_outcomes):
    _, filtered = signal_outcomes
    assert filtered[name] == SIGNAL_REFUSED[name]


@pytest.mark.parametrize("name", SIGNAL_ALLOWED)
def test_the_filter_allows_signals_to_other_processes(name, signal_outcomes):
    plain, filtered = signal_outcomes
    assert plain[name] == filtered[name] == "ok"


def test_every_signal_probe_is_expected_one_way_or_the_other():
    names = set(signal_probes(0, 0))
    assert names == set(SIGNAL_REFUSED) | set(SIGNAL_ALLOWED) and not set(SIGNAL_REFUSED) & set(SIGNAL_ALLOWED)


def test_install_refuses_too_many_protected_pids_before_filtering():
    def attempt() -> int:  # in a fork: should it filter after all, this process stays as it was
        try:
            seccomp.install(range(1, seccomp.MAX_PROTECTED + 2))
        except ValueError:
            return 0 if _libc().prctl(seccomp.PR_GET_SECCOMP, 0, 0, 0, 0) == 0 else 1
        return 2
    _in_fork(attempt)


def test_available_and_described():
    assert seccomp.available()
    assert "AF_UNIX" in seccomp.REFUSES and "signals" in seccomp.REFUSES and "\n" not in seccomp.REFUSES


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

def run_filter(arch: seccomp.Arch, nr: int, *args: int, audit: int | None = None, protected=()) -> int:
    args = tuple(arg & 0xFFFFFFFF_FFFFFFFF for arg in args)  # as a register holds a negative int
    data = struct.pack("<iIQ6Q", nr, arch.audit if audit is None else audit, 0, *args, *[0] * (6 - len(args)))
    instructions, accumulator, index = seccomp.program(arch, protected), 0, 0
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
PROTECTED = (4242, 1_000_000)  # the daemon and the spawner, say
UNPROTECTED = (1, 4241, 4243, 1_000_001, 0x7FFFFFFF)


@pytest.mark.parametrize("protected", [(), PROTECTED], ids=["none", "some"])
@pytest.mark.parametrize("arch", ARCHES, ids=lambda arch: arch.name)
def test_program_sockets(arch, protected):
    unix, inet, inet6, netlink = socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK
    stream, dgram, seqpacket = socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET
    flags = socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
    assert run_filter(arch, arch.socket, unix, stream, protected=protected) == EAFNOSUPPORT
    high_bits = unix | 0xFFFFFFFF00000000  # the kernel reads an int
    assert run_filter(arch, arch.socket, high_bits, dgram, protected=protected) == EAFNOSUPPORT
    for family in (inet, inet6, netlink):
        assert run_filter(arch, arch.socket, family, dgram, protected=protected) == ALLOW
    for kind in (dgram, dgram | flags, socket.SOCK_RAW, socket.SOCK_RDM, 0):
        assert run_filter(arch, arch.socketpair, unix, kind, protected=protected) == EAFNOSUPPORT
    for kind in (stream, stream | flags, seqpacket, seqpacket | flags):
        assert run_filter(arch, arch.socketpair, unix, kind, protected=protected) == ALLOW
    assert run_filter(arch, arch.socketpair, inet, dgram, protected=protected) == ALLOW


@pytest.mark.parametrize("arch", ARCHES, ids=lambda arch: arch.name)
def test_program_refusals_and_the_rest(arch):
    assert run_filter(arch, arch.ptrace) == EPERM
    assert run_filter(arch, seccomp.PIDFD_GETFD, 3, 0, 0) == EPERM
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


def signal_calls(arch: seccomp.Arch) -> dict[str, int]:
    """The calls refused by their first argument, a pid (or, for tkill, a thread id)."""
    return {"kill": arch.kill, "tkill": arch.tkill, "tgkill": arch.tgkill, "rt_sigqueueinfo": arch.rt_sigqueueinfo,
            "rt_tgsigqueueinfo": arch.rt_tgsigqueueinfo, "pidfd_open": seccomp.PIDFD_OPEN,
            "prlimit64": arch.prlimit64}


def fcntls(arch: seccomp.Arch) -> list[int]:
    return [number for number in (arch.fcntl, arch.fcntl64) if number is not None]


@pytest.mark.parametrize("arch", ARCHES, ids=lambda arch: arch.name)
def test_program_signals_to_a_protected_pid(arch):
    for name, number in signal_calls(arch).items():
        for pid in PROTECTED:
            assert run_filter(arch, number, pid, 0, protected=PROTECTED) == EPERM, name
            assert run_filter(arch, number, pid | 0xFFFFFFFF_00000000, 0, protected=PROTECTED) == EPERM, name
            assert run_filter(arch, number, pid, 0) == ALLOW, name  # nothing protected
        for pid in UNPROTECTED:
            assert run_filter(arch, number, pid, 0, protected=PROTECTED) == ALLOW, name
        assert run_filter(arch, number, 0, 0, protected=PROTECTED) == ALLOW, name  # 0: the caller itself, or its group
        assert run_filter(arch, number, PROTECTED[0] << 32, 0, protected=PROTECTED) == ALLOW, name  # pid_t 0


@pytest.mark.parametrize("arch", ARCHES, ids=lambda arch: arch.name)
def test_program_kill_of_a_protected_group_or_of_everyone(arch):
    for pid in PROTECTED:
        assert run_filter(arch, arch.kill, -pid, 9, protected=PROTECTED) == EPERM
        assert run_filter(arch, arch.kill, -pid & 0xFFFFFFFF, 9, protected=PROTECTED) == EPERM  # not sign-extended
        assert run_filter(arch, arch.kill, -pid, 9) == ALLOW
    for everyone in (-1, 0xFFFFFFFF, 0xFFFFFFFF_FFFFFFFF, 0x12345678_FFFFFFFF):
        assert run_filter(arch, arch.kill, everyone, 9, protected=PROTECTED) == EPERM
        assert run_filter(arch, arch.kill, everyone, 9) == ALLOW  # nothing protected: nothing refused
    for pid in UNPROTECTED[1:]:  # -1 is everyone
        assert run_filter(arch, arch.kill, -pid, 9, protected=PROTECTED) == ALLOW
    # -1 and -pid mean nothing to the others (the kernel answers EINVAL or ESRCH); they pass.
    for name, number in signal_calls(arch).items():
        if number != arch.kill:
            assert run_filter(arch, number, -1, 0, protected=PROTECTED) == ALLOW, name
            assert run_filter(arch, number, -PROTECTED[0], 0, protected=PROTECTED) == ALLOW, name


@pytest.mark.parametrize("arch", ARCHES, ids=lambda arch: arch.name)
def test_program_file_owners_and_pidfd_signals(arch):
    setown, setown_ex, getown, setfl = seccomp.F_SETOWN, seccomp.F_SETOWN_EX, 9, 4
    for number in fcntls(arch):
        for pid in PROTECTED:
            for owner in (pid, -pid, pid | 0xFFFFFFFF_00000000):
                assert run_filter(arch, number, 3, setown, owner, protected=PROTECTED) == EPERM
                assert run_filter(arch, number, 3, setown, owner) == ALLOW
            assert run_filter(arch, number, 3, getown, pid, protected=PROTECTED) == ALLOW
            assert run_filter(arch, number, pid, setfl, 0, protected=PROTECTED) == ALLOW
        for pid in UNPROTECTED:
            for owner in (pid, -pid):
                assert run_filter(arch, number, 3, setown, owner, protected=PROTECTED) == ALLOW
        assert run_filter(arch, number, 3, setown_ex, 0x7FFF0000, protected=PROTECTED) == EPERM  # behind a pointer
        assert run_filter(arch, number, 3, setown_ex, 0x7FFF0000) == ALLOW
    for request in (seccomp.FIOSETOWN, seccomp.SIOCSPGRP, seccomp.SIOCSPGRP | 0xFFFFFFFF_00000000):
        assert run_filter(arch, arch.ioctl, 3, request, 0x7FFF0000, protected=PROTECTED) == EPERM
        assert run_filter(arch, arch.ioctl, 3, request, 0x7FFF0000) == ALLOW
    for request in (0x5421, 0x8903, 0x541B):  # FIONBIO, FIOGETOWN, FIONREAD
        assert run_filter(arch, arch.ioctl, 3, request, 0x7FFF0000, protected=PROTECTED) == ALLOW
    assert run_filter(arch, seccomp.PIDFD_SEND_SIGNAL, 3, 9, 0, 0, protected=PROTECTED) == ENOSYS
    assert run_filter(arch, seccomp.PIDFD_SEND_SIGNAL, 3, 9, 0, 0) == ALLOW


@pytest.mark.parametrize("arch", ARCHES, ids=lambda arch: arch.name)
def test_program_protecting_lets_the_rest_through(arch):
    looked_at = {arch.socket, arch.socketpair, arch.ptrace, arch.socketcall, arch.ioctl, seccomp.PIDFD_GETFD,
                 seccomp.PIDFD_SEND_SIGNAL, *seccomp.IO_URING, *signal_calls(arch).values(), *fcntls(arch),
                 *arch.shared_with_the_host}
    for number in range(460):
        if number not in looked_at:
            assert run_filter(arch, number, PROTECTED[0], seccomp.F_SETOWN, PROTECTED[0], protected=PROTECTED) == ALLOW


@pytest.mark.parametrize("arch", ARCHES, ids=lambda arch: arch.name)
def test_program_numbers_are_distinct(arch):
    numbers = [arch.socket, arch.socketpair, arch.ptrace, arch.ioctl, seccomp.PIDFD_GETFD, seccomp.PIDFD_SEND_SIGNAL,
               *seccomp.IO_URING, *signal_calls(arch).values(), *fcntls(arch), *arch.shared_with_the_host]
    if arch.socketcall is not None:
        numbers.append(arch.socketcall)
    assert len(numbers) == len(set(numbers))


HEADERS = {  # where Debian's linux-libc-dev keeps the numbers of an arch, when it is installed for it
    "x86_64": ["/usr/include/x86_64-linux-gnu/asm/unistd_64.h"],
    "i386": ["/usr/include/x86_64-linux-gnu/asm/unistd_32.h", "/usr/include/i386-linux-gnu/asm/unistd_32.h"],
    "aarch64": ["/usr/include/asm-generic/unistd.h"],
    "riscv64": ["/usr/include/asm-generic/unistd.h"],
    "arm": ["/usr/include/arm-linux-gnueabihf/asm/unistd-eabi.h", "/usr/include/arm-linux-gnueabi/asm/unistd-eabi.h"],
}


@pytest.mark.parametrize("arch", ARCHES, ids=lambda arch: arch.name)
def test_program_numbers_match_the_kernel_headers(arch):
    header = next((Path(path) for path in HEADERS[arch.name] if Path(path).exists()), None)
    if header is None:
        pytest.skip(f"no kernel headers for {arch.name} here")
    numbers = {}
    for line in header.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "#define" and parts[2].isdigit():
            numbers[parts[1].removeprefix("__NR3264_").removeprefix("__NR_")] = int(parts[2])
    expected = {"socket": arch.socket, "socketpair": arch.socketpair, "ptrace": arch.ptrace, "ioctl": arch.ioctl,
                "fcntl": arch.fcntl, "pidfd_getfd": seccomp.PIDFD_GETFD, "pidfd_send_signal": seccomp.PIDFD_SEND_SIGNAL,
                **signal_calls(arch)}
    if arch.fcntl64 is not None:
        expected["fcntl64"] = arch.fcntl64
    if arch.socketcall is not None:
        expected["socketcall"] = arch.socketcall
    assert {name: numbers.get(name) for name in expected} == expected
    host_calls = ("shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop", "semtimedop_time64",
                  "msgget", "msgsnd", "msgrcv", "msgctl", "add_key", "request_key", "keyctl", "ipc")
    if arch.name in ("x86_64", "aarch64", "riscv64"):  # 64-bit time everywhere: no *_time64 calls
        host_calls = tuple(name for name in host_calls if not name.endswith("_time64"))
    assert {numbers[name] for name in host_calls if name in numbers} == set(arch.shared_with_the_host)


@pytest.mark.parametrize("arch", ARCHES, ids=lambda arch: arch.name)
def test_program_refuses_sysv_ipc_and_keyrings(arch):
    assert arch.shared_with_the_host
    for number in arch.shared_with_the_host:
        assert run_filter(arch, number) == ENOSYS
        assert run_filter(arch, number, protected=PROTECTED) == ENOSYS


def test_protected_pids_are_checked():
    arch = seccomp.ARCHES["x86_64"]
    seccomp.program(arch, [1, 2, 2, 3, 4, 4])  # four once repeats are dropped
    for protected in ([1, 2, 3, 4, 5], [0], [-5], [True], ["12"], [2**31]):
        with pytest.raises(ValueError):
            seccomp.program(arch, protected)
    assert seccomp.program(arch) == seccomp.program(arch, [])


def test_program_refuses_x32_calls_on_x86_64_only():
    x86_64, aarch64 = seccomp.ARCHES["x86_64"], seccomp.ARCHES["aarch64"]
    assert run_filter(x86_64, seccomp.X32_SYSCALL_BIT | 39) == ENOSYS
    assert run_filter(x86_64, 39) == ALLOW
    assert run_filter(aarch64, seccomp.X32_SYSCALL_BIT | 39) == ALLOW


if __name__ == "__main__":
    if sys.argv[1] == "signals":
        mode, victim_pid, other_pid = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        if mode == "install":
            seccomp.install(protected=[victim_pid, os.getppid()])
        attempts = signal_probes(victim_pid, other_pid)
    else:
        mode, socket_path, abstract_name = sys.argv[1:]
        if mode == "install":
            seccomp.install()
        attempts = probes(socket_path, abstract_name)
    print(json.dumps({name: outcome(attempt) for name, attempt in attempts.items()}))

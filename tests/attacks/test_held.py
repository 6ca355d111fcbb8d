"""Attacks that held when issue 17 was filed, kept as tests so they go on holding: from a command, against the daemon
and the spawner, pidfd_getfd (copying an open file descriptor out), process_vm_readv (reading memory), ptrace,
kill and open_by_handle_at (opening the wallet by a file handle, around the path rules); and read_file on a FIFO.
Through the real agent (``build_agent``; the daemon is this process), with the key guard off, under Landlock and
under the namespace fallback (where only the seccomp filter keeps signals from the daemon and the spawner):
nothing may be reached, and no key material may come out.
"""

from __future__ import annotations

import os

import pytest

from attack_kit import KeyWatch, capture_logs, finish, stored_calls, turn
from attack_kit import model  # noqa: F401 (fixtures)
from automaton_min.confine.landlock import abi_version

pytestmark = pytest.mark.skipif(abi_version() < 1, reason="this kernel has no Landlock")

ENV_CANARY = "env-canary-0a9b8c7d6e"

# argv: daemon pid, spawner pid, the home. Prints one line per attempt: HELD or GOT.
PROBE = r"""
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
daemon, spawner, wallet = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] + '/wal' + 'let.json'
PIDFD_OPEN, PIDFD_GETFD, NAME_TO_HANDLE_AT, OPEN_BY_HANDLE_AT = 434, 438, 303, 304

def report(what, got):
    print(what, 'GOT' if got else 'HELD', ctypes.get_errno())

for name, pid in (('daemon', daemon), ('spawner', spawner)):
    pidfd = libc.syscall(PIDFD_OPEN, pid, 0)
    stolen = [fd for fd in range(64) if pidfd >= 0 and libc.syscall(PIDFD_GETFD, pidfd, fd, 0) >= 0]
    report(f'{name} pidfd_getfd', bool(stolen))
    class iovec(ctypes.Structure):
        _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
    buf = ctypes.create_string_buffer(64)
    local = iovec(ctypes.cast(buf, ctypes.c_void_p), 64)
    remote = iovec(0x400000, 64)
    report(f'{name} process_vm_readv', libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) > 0)
    report(f'{name} ptrace', libc.ptrace(16, pid, None, None) == 0)  # PTRACE_ATTACH
    try:
        os.kill(pid, 0)
        report(f'{name} kill', True)
    except OSError:
        report(f'{name} kill', False)

class Handle(ctypes.Structure):
    _fields_ = [('bytes', ctypes.c_uint), ('type', ctypes.c_int), ('f', ctypes.c_ubyte * 128)]
handle = Handle(128)
mount_id = ctypes.c_int()
named = libc.syscall(NAME_TO_HANDLE_AT, -100, wallet.encode(), ctypes.byref(handle), ctypes.byref(mount_id), 0)
opened = -1
if named == 0:
    root = os.open('/', os.O_RDONLY)
    opened = libc.syscall(OPEN_BY_HANDLE_AT, root, ctypes.byref(handle), os.O_RDONLY)
report('open_by_handle_at', opened >= 0 and bool(os.read(opened, 4096)))
"""


@pytest.mark.parametrize("confinement", ["landlock", "namespace"])
def test_what_held_still_holds(agent_for, model, home, monkeypatch, confinement) -> None:
    """With the namespace fallback nothing scopes signals but the seccomp filter: it must hold alone."""
    monkeypatch.setenv("AUTOMATON_TEST_TOKEN", ENV_CANARY)
    log = capture_logs()
    agent = agent_for(execConfinement=confinement)
    if not agent.sandbox.describe().startswith(confinement):
        pytest.skip(f"{confinement} confinement is not available here: {agent.sandbox.describe()}")
    agent.hooks.key_guard = None
    watch = KeyWatch.of(home)
    os.mkfifo(home.root / "workspace" / "fifo")
    spawner = agent.sandbox.spawner_pid
    model.script(turn(("write_file", {"path": "held.py", "content": PROBE})),
                 turn(("exec", {"command": f"python3 held.py {os.getpid()} {spawner} {home.root}"}),
                      ("read_file", {"path": "fifo"})),
                 finish())

    agent.loop.run_cycle("attack")

    assert model.pending == 0
    probe = next(result for name, args, result, _ in stored_calls(agent.db, "exec") if "held.py" in args["command"])
    lines = [line for line in probe.splitlines() if " HELD " in line or " GOT " in line]
    assert len(lines) == 9, [c[2:] for c in stored_calls(agent.db, "exec")]
    assert not [line for line in lines if " GOT " in line], probe
    fifo = next((result, error) for name, args, result, error in stored_calls(agent.db, "read_file"))
    assert fifo[1] and not fifo[0], fifo
    watch.assert_agent_clean(agent, model, log, home, ENV_CANARY)

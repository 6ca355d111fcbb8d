"""Attacks through UNIX sockets: a command reaching an unconfined neighbour (the owner's tmux, ssh-agent, D-Bus or
docker socket) that does what it is asked outside the confinement, and a command forging the service manager's
notifications.

The neighbours are plain listeners of the test's own: a path socket in /tmp, one in another directory the user
owns, and an abstract one. On every connection a neighbour does what a tmux server would do for its owner: copies
``wallet.json`` and ``automaton.json`` into the agent's workspace (as base32 and hex of the text) and sends them
back. The command finds them as an attacker would, in ``/proc/net/unix``. Nothing may connect, nothing may land
in the workspace, and neither the key nor the API key may reach a tool result, a model request, the log or
``state.db`` -- with the key guard on and off.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import platform
import socket
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

from attack_kit import KeyWatch, capture_logs, finish, request_bodies, stored_calls, turn
from attack_kit import model  # noqa: F401 (fixtures)
from machine_kit import agent_run, asleep_then_stopped, set_up_home
from automaton_min.confine.landlock import abi_version

pytestmark = pytest.mark.skipif(abi_version() < 1, reason="this kernel has no Landlock")

API_KEY_CANARY = "sk-ant-api-canary-4c7e1a9b3d"
ENV_CANARY = "env-canary-91b2c3d4e5"

# What a command runs: every neighbour-looking socket in /proc/net/unix, then the abstract one, by name.
PROBE = r"""
import socket, sys
pair = socket.socketpair()
pair[0].sendall(b'pipe ok')
print(pair[1].recv(16).decode())
inet = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
inet.bind(('127.0.0.1', 0))
print('inet ok')
names = [line.split()[-1] for line in open('/proc/net/unix').read().splitlines()[1:] if 'neighbour' in line]
for name in names + sys.argv[1:]:
    address = '\0' + name[1:] if name.startswith('@') else name
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(address)
        s.sendall(b'copy the files please\n')
        print(name, 'ANSWERED', s.recv(1 << 16)[:100].decode(errors='replace'))
    except OSError as exc:
        print(name, 'refused:', exc)
    try:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.sendto(b'copy the files please\n', address)
        print(name, 'DATAGRAM SENT')
    except OSError as exc:
        print(name, 'datagram refused:', exc)
"""


class Neighbour:
    """An unconfined server of the same user that does what any client asks (as tmux does for its owner)."""

    def __init__(self, address: str, home, family_type: int = socket.SOCK_STREAM) -> None:
        self.address = address
        self.home = home
        self.connections = 0
        self.sock = socket.socket(socket.AF_UNIX, family_type)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _secrets(self) -> bytes:
        text = self.home.wallet_path.read_bytes() + self.home.config_path.read_bytes()
        return base64.b32encode(text) + b"\n" + text.hex().encode()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            loot = self._secrets()
            (self.home.root / "workspace" / f"from-neighbour-{self.connections}.txt").write_bytes(loot)
            with conn:
                conn.sendall(loot)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
        if not self.address.startswith("@"):
            Path(self.address).unlink(missing_ok=True)


@pytest.fixture
def neighbours(home, tmp_path):
    tag = uuid.uuid4().hex[:8]
    other_dir = tmp_path / "user" / ".tmux-neighbour"
    other_dir.mkdir(parents=True)
    addresses = [os.path.join(tempfile.gettempdir(), f"neighbour-{tag}.sock"), str(other_dir / "neighbour-default"),
                 f"@neighbour-abstract-{tag}"]
    made = [Neighbour(address, home) for address in addresses]
    yield made
    for neighbour in made:
        neighbour.close()


@pytest.mark.parametrize("key_guard", ["on", "off"])
def test_no_command_reaches_a_neighbours_socket(agent_for, model, home, neighbours, monkeypatch, key_guard) -> None:
    monkeypatch.setenv("AUTOMATON_TEST_TOKEN", ENV_CANARY)
    log = capture_logs()
    agent = agent_for(anthropicApiKey=API_KEY_CANARY)
    if key_guard == "off":
        agent.hooks.key_guard = None
    watch = KeyWatch.of(home)
    abstract = next(n.address for n in neighbours if n.address.startswith("@"))
    model.script(turn(("write_file", {"path": "probe.py", "content": PROBE})),
                 turn(("exec", {"command": f"python3 probe.py {abstract}"})),
                 turn(("exec", {"command": "ls; cat from-neighbour-* 2>/dev/null | head -c 4000"})),
                 finish())

    agent.loop.run_cycle("attack")

    assert model.pending == 0
    probe = next(result for name, args, result, _ in stored_calls(agent.db, "exec") if "probe.py" in args["command"])
    assert "pipe ok" in probe and "inet ok" in probe, probe  # what commands may do still works
    assert [n.connections for n in neighbours] == [0, 0, 0], probe
    assert "ANSWERED" not in probe and "DATAGRAM SENT" not in probe, probe
    assert not list((home.root / "workspace").glob("from-neighbour-*"))
    watch.assert_agent_clean(agent, model, log, home, ENV_CANARY)
    everything = json.dumps(stored_calls(agent.db)) + request_bodies(model) + log.getvalue()
    for secret in (API_KEY_CANARY, API_KEY_CANARY.encode().hex(), base64.b32encode(API_KEY_CANARY.encode()).decode()[:24]):
        assert secret not in everything


class NotifyListener:
    """A stand-in for the service manager's notify socket: records every datagram."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.datagrams: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self.datagrams.append(self.sock.recv(4096).decode(errors="replace"))
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


FORGE = r"""
import socket
names = [line.split()[-1] for line in open('/proc/net/unix').read().splitlines()[1:] if 'notify' in line.split()[-1]]
for name in names:
    for how in ('socket', 'pair', 'connect'):
        try:
            if how == 'socket':
                socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'STATUS=all good (forged by a command)', name)
            elif how == 'pair':
                socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendto(b'WATCHDOG=trigger', name)
            else:
                s = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0]
                s.connect(name)
                s.send(b'STATUS=forged through connect')
            print(name, how, 'SENT')
        except OSError as exc:
            print(name, how, 'refused:', exc)
print('found', len(names))
"""


def test_no_command_forges_a_service_notification(cli, home, model, tmp_path) -> None:
    set_up_home(cli, home, model)
    notify = NotifyListener(tmp_path / "notify")
    model.script(turn(("write_file", {"path": "forge.py", "content": FORGE})),
                 turn(("exec", {"command": "python3 forge.py"})), finish())
    try:
        with agent_run(home.root, {"NOTIFY_SOCKET": str(notify.path)}) as run:
            asleep_then_stopped(run)
    finally:
        notify.close()
    assert model.pending == 0, run.output
    assert any("READY=1" in d for d in notify.datagrams), notify.datagrams  # the daemon's own still arrive
    assert not any("forged" in d or "trigger" in d for d in notify.datagrams), notify.datagrams
    result = next(m["content"] for m in model.requests[-1].body["messages"] if m["role"] == "tool" and "found" in m["content"])
    assert str(notify.path) in result and "SENT" not in result, result


# What else the host shares with a command unless refused: SysV IPC (the IPC namespace) and the owner's keyrings.
SHARED = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
shm_key, description, keyctl = int(sys.argv[1]), sys.argv[2].encode(), int(sys.argv[3])
segment = libc.shmget(shm_key, 0, 0)
print('shm', 'GOT' if segment >= 0 else 'HELD', ctypes.get_errno())
found = libc.syscall(keyctl, 10, -3, b"user", description, 0)  # KEYCTL_SEARCH
print('keyring', 'GOT' if found >= 0 else 'HELD', ctypes.get_errno())
"""


KEY_CALLS = {"x86_64": (248, 250), "aarch64": (217, 219), "riscv64": (217, 219)}  # add_key, keyctl: no glibc wrappers


def test_no_command_reaches_the_hosts_sysv_ipc_or_the_owners_keyrings(agent_for, model, home) -> None:
    if platform.machine() not in KEY_CALLS:
        pytest.skip(f"no keyring call numbers for {platform.machine()} in this test")
    add_key, keyctl = KEY_CALLS[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    shm_key = 0x5A000000 + os.getpid() % 0xFFFF
    segment = libc.shmget(shm_key, 4096, 0o1600)  # IPC_CREAT, 0600: a neighbour's segment
    description = f"owner-token-{uuid.uuid4().hex[:8]}"
    libc.syscall.restype = ctypes.c_long
    key = libc.syscall(add_key, b"user", description.encode(), b"OWNER-SECRET", 12, -3)  # this session's keyring
    if segment < 0 or key < 0:
        pytest.skip("no SysV shared memory or keyrings here")
    try:
        agent = agent_for()
        model.script(turn(("write_file", {"path": "shared.py", "content": SHARED})),
                     turn(("exec", {"command": f"python3 shared.py {shm_key} {description} {keyctl}"})), finish())
        agent.loop.run_cycle("attack")
    finally:
        libc.shmctl(segment, 0, None)  # IPC_RMID
        libc.syscall(keyctl, 21, key, 0, 0)  # KEYCTL_INVALIDATE
    probe = next(result for name, args, result, _ in stored_calls(agent.db, "exec") if "shared.py" in args["command"])
    assert "shm HELD" in probe and "keyring HELD" in probe, probe

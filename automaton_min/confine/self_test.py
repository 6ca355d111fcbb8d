"""What ``automaton-min doctor`` proves about local commands here (README: Security, how to check): it starts the
confinement the agent would get and tries from a command what it must refuse (read the wallet, change a file outside
the workspace, connect to a UNIX socket listening outside, leave a setsid'd process behind), then reports what bounds
a command and the disk reserve.
"""

from __future__ import annotations

import os
import shlex
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from automaton_min.confine import reaper
from automaton_min.confine.client import RefusingSandbox, UnconfinedSandbox, local_sandbox
from automaton_min.store.disk_reserve import DiskReserve

KERNEL_FIX = ("use Linux >= 5.13 with Landlock enabled (lsm=...,landlock) or allow unprivileged user namespaces "
              "(sysctl kernel.unprivileged_userns_clone=1); unconfinedExec runs commands unprotected")
SECCOMP_FIX = "use a kernel with seccomp filters (CONFIG_SECCOMP_FILTER, as Debian and Raspberry Pi OS ship)"
USERNS_FIX = ("allow user namespaces (sysctl user.max_user_namespaces > 0; on Ubuntu "
              "kernel.apparmor_restrict_unprivileged_userns=0; under systemd RestrictNamespaces=user mnt and "
              "SystemCallFilter=@mount, as the shipped unit has)")


@dataclass(frozen=True)
class Probe:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def self_test(home: Path, workspace: Path, config: Any) -> list[Probe]:
    """Every probe, in order; with commands refused or unconfined, the first one says so and fails."""
    sandbox = local_sandbox(home, workspace, config, own_cgroup=True)
    try:
        if isinstance(sandbox, RefusingSandbox):
            return [Probe("confinement", False, f"local commands would be refused: {sandbox.why}", KERNEL_FIX)]
        probes = [_wallet(sandbox, home)]
        if isinstance(sandbox, UnconfinedSandbox):
            return probes
        probes += [_host_files(sandbox), _unix_sockets(sandbox), _processes(sandbox, workspace),
                   Probe("limits", bool(sandbox.report.get("oom_first")), sandbox.limits())]
    finally:
        sandbox.close()
    return probes + [_disk(home, workspace)]


def _wallet(sandbox: Any, home: Path) -> Probe:
    wallet = shlex.quote(str(Path(home) / "wallet.json"))
    probe = Path(home) / ".confinement-probe"
    sandbox.exec(f"cat {wallet} > /dev/null 2>&1 && echo REACHABLE > {shlex.quote(str(probe))}", 10)
    reachable = probe.exists()  # seen from here: a write that landed in a namespace's cover does not count
    probe.unlink(missing_ok=True)
    held = not reachable and not isinstance(sandbox, UnconfinedSandbox)
    detail = f"{sandbox.describe()}; wallet.json {'is READABLE' if reachable else 'unreachable'} from a command"
    return Probe("confinement", held, detail, "" if held else KERNEL_FIX)


def _state(path: Path) -> tuple:
    """What a command must not change in a file of this process's: content, mode, owner, times, extended attributes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOATIME)  # reading must not move the access time itself
    try:
        info, content = os.fstat(fd), os.read(fd, 4096)
    finally:
        os.close(fd)
    return (content, info.st_mode, info.st_uid, info.st_gid, info.st_mtime_ns, info.st_atime_ns,
            sorted(os.listxattr(path)))


def _host_files(sandbox: Any) -> Probe:
    """From a command: chmod, chown, utime and setxattr on a file of the daemon's outside the workspace."""
    with tempfile.TemporaryDirectory(prefix="automaton-doctor-") as outside:
        canary = Path(outside) / "canary"
        canary.write_bytes(b"canary")
        os.chmod(canary, 0o644)
        before = _state(canary)
        name = shlex.quote(str(canary))
        code = f"import os; os.setxattr({str(canary)!r}, 'user.probe', b'1')"
        sandbox.exec(f"chmod 606 {name}; chown 65534:65534 {name}; touch {name}; python3 -c {shlex.quote(code)}", 10)
        changed = _state(canary) != before
    held = bool(sandbox.report.get("read_only")) and not sandbox.report.get("read_only_refused") and not changed
    outcome = ("a command's chmod, chown, touch and setxattr changed nothing" if not changed else
               "a command CHANGED a file outside the workspace (its mode, owner, times or attributes)")
    return Probe("host files", held, f"{sandbox.host_files()}; {outcome}", "" if held else USERNS_FIX)


def _unix_sockets(sandbox: Any) -> Probe:
    refused = sandbox.report.get("unix_sockets") == "refused"
    with tempfile.TemporaryDirectory(prefix="automaton-doctor-") as outside:
        path = os.path.join(outside, "listener")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
            listener.listen(1)
            listener.setblocking(False)
            code = f"import socket; socket.socket(socket.AF_UNIX).connect({path!r})"
            sandbox.exec(f"python3 -c {shlex.quote(code)} > /dev/null 2>&1", 10)
            try:
                listener.accept()[0].close()
                connected = True
            except BlockingIOError:
                connected = False
        finally:
            listener.close()
    ok = refused and not connected
    detail = ("refused: a command cannot create a UNIX socket (seccomp filter)" if ok else
              f"NOT refused ({sandbox.report.get('unix_sockets')})"
              f"{': a command connected to one outside' if connected else ''}")
    return Probe("unix sockets", ok, detail, "" if ok else SECCOMP_FIX)


def _processes(sandbox: Any, workspace: Path) -> Probe:
    marker = Path(workspace) / ".doctor-left-behind"
    sandbox.exec(f"(setsid sleep 300 > /dev/null 2>&1 & echo $! > {shlex.quote(str(marker))})", 10)
    try:
        pid = int(marker.read_text())
    except (OSError, ValueError):
        return Probe("processes", False, "the probe could not start a process", "")
    finally:
        marker.unlink(missing_ok=True)
    gone = not reaper.alive(pid)
    detail = ("what a command leaves behind (setsid, double fork) ends with its call" if gone
              else f"a setsid'd process (pid {pid}) outlived its call")
    return Probe("processes", gone, detail)


def _disk(home: Path, workspace: Path) -> Probe:
    disk = DiskReserve(home, workspace)
    free, held = disk.free_bytes(), disk.held
    reserve = f"{disk.size >> 20} MB reserve {'held' if held else 'kept while the agent runs'}"
    ok = free >= disk.size or held
    detail = f"{free / (1 << 20):.0f} MB free where the home is; {reserve}"
    return Probe("disk reserve", ok, detail, "" if ok else f"free some space on the disk holding {home} (df -h)")

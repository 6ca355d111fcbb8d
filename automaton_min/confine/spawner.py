"""The confined spawner: one small process that runs the agent's commands and file operations (README: Security).

It confines itself (Landlock or the namespace fallback, then seccomp) before it answers the daemon over a socket
pair; everything it needs is imported before that, since the package's directory may be out of reach afterwards.
SIGTERM cancels the command under way; the spawner ends when the daemon closes the channel.

Requests: ``{"op": "exec", "command", "timeout_s"}``, ``{"op": "read_file", "path"}``,
``{"op": "write_file", "path", "content"}``, ``{"op": "start_job", "command"}``, ``{"op": "stop_job", "id"}``,
``{"op": "jobs"}`` (background jobs, ``jobs.py``); replies ``{"ok": true, ...}`` or
``{"ok": false, "errno", "error"}``.
"""

from __future__ import annotations

import errno as errno_codes
import os
import resource
import signal
import socket
import sys
from collections.abc import Callable

from automaton_min.confine import caps, landlock, namespace, reaper, seccomp
from automaton_min.confine.jobs import Job, Jobs
from automaton_min.confine.libc import trim_heap
from automaton_min.confine.plan import Plan
from automaton_min.confine.wire import ChannelClosed, receive, send
from automaton_min.conway.local import LocalSandbox  # with everything exec needs (subprocess, selectors, codecs)
from automaton_min.trees import remove_tree

OOM_SCORE_ADJ = "1000"  # the OOM killer's first choice: needs no privilege, inherited by every command
MAX_FILE_BYTES = 1 << 30  # RLIMIT_FSIZE for commands: one runaway file cannot take a small card in one go



def landlock_ruleset(plan: Plan, abi: int) -> landlock.Ruleset:
    """The plan as a Landlock ruleset: everything in the workspace and temp dir, read/execute elsewhere it names."""
    ruleset = landlock.Ruleset(abi)
    full = landlock.handled_fs(abi)
    for writable in (plan.workspace, plan.tmp):
        ruleset.allow(landlock.Rule(writable, full))
    for path in plan.read_only:
        ruleset.allow(landlock.Rule(path, landlock.READ_ONLY))
    for device in plan.devices:
        ruleset.allow(landlock.Rule(device, landlock.READ_WRITE_DEVICE))
    return ruleset


def isolate(plan: Plan, way: str, *, plan_devices_only: bool = False) -> dict:
    """In the private mount namespace entered ``way`` (``namespace.private_mounts``): hide the home (and with
    ``plan_devices_only`` all of /dev but the plan's devices), then make every mount read-only but the workspace and
    temp dir. What to report."""
    namespace.hide_home(plan.home, plan.workspace, plan.tmp / ".workspace-mount")
    if plan_devices_only:
        namespace.bare_dev(plan.devices, plan.tmp / ".dev")
    refused = namespace.read_only_except([plan.workspace, plan.tmp])
    return {"home_hidden": True, "read_only": way, "read_only_refused": refused}


def confine(plan: Plan, method: str) -> tuple[dict, object]:
    """Confine this process by ``method``; returns what to report and the per-command setup function."""
    plan.workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
    if method == "landlock":
        # Landlock governs neither chmod, chown, utime nor setxattr: where a mount namespace can be had, every mount
        # but the workspace and temp dir is also made read-only, and the home is hidden.
        try:
            isolated = isolate(plan, namespace.private_mounts())
        except OSError as exc:
            isolated = {"home_hidden": False, "read_only": None, "not_read_only": exc.strerror or str(exc)}
        abi = landlock.abi_version()
        ruleset = landlock_ruleset(plan, abi)
        caps.drop_all()
        ruleset.restrict_self()
        return {"method": "landlock", "abi": abi, "scoped": bool(ruleset.scoped), **isolated}, ruleset.restrict_self
    if method == "namespace":
        way = namespace.private_mounts()
        if way != "user namespace":
            # root's commands would share the first user namespace with the host's root processes that hold no
            # capability, and without Landlock nothing would keep them from those processes' /proc/<pid>/root
            raise OSError(errno_codes.EPERM, "no user namespace (the namespace method needs one)")
        isolated = isolate(plan, way, plan_devices_only=True)  # no Landlock keeps a command run as root from the disks
        caps.drop_all()
        landlock.set_no_new_privs()
        return {"method": "namespace", **isolated}, None
    raise ValueError(f"unknown confinement method {method!r}")


class Cancelled(Exception):
    """SIGTERM from the daemon (the agent is stopping): the command under way is ended, the spawner goes on."""


def _cancel(signum, frame) -> None:
    raise Cancelled()


class OomScore:
    """This process's ``oom_score_adj``, through a file opened before confinement (Landlock then refuses
    opening it): raised to 1000 around each command's fork, so the command inherits it, then put back.
    Raising needs no privilege; going back down is allowed to the value this process inherited."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open("/proc/self/oom_score_adj", os.O_RDWR | os.O_CLOEXEC)
            self.own = os.pread(self._fd, 16, 0).strip() or b"0"
        except OSError:
            self._fd, self.own = None, b"0"

    @property
    def available(self) -> bool:
        return self._fd is not None

    def _write(self, value: bytes) -> bool:
        if self._fd is None:
            return False
        try:
            os.pwrite(self._fd, value, 0)
        except OSError:
            return False
        return True

    def raised(self) -> bool:
        return self._write(OOM_SCORE_ADJ.encode())

    def restore(self) -> None:
        self._write(self.own)


class SpawnerSandbox(LocalSandbox):
    """Local commands as the spawner runs them: each one starts as the OOM killer's first choice, and when a
    call ends everything it started ends too, but the background jobs."""

    def __init__(self, *args, oom: OomScore, **kwargs) -> None:
        super().__init__(*args, sweep=self.end_leftovers, **kwargs)
        self.oom = oom
        self.jobs = Jobs(self.workspace)

    def end_leftovers(self) -> None:
        reaper.end_descendants(spare=self.jobs.pids())

    def _start(self, command: str):
        self.oom.raised()
        try:
            return super()._start(command)
        finally:
            self.oom.restore()

    def start_job(self, command: str) -> Job:
        self._ensure_workspace()
        self.oom.raised()
        try:
            return self.jobs.start(command, self.child_env(), self.child_setup)
        finally:
            self.oom.restore()


def agents_own_processes() -> list[int]:
    """What the filter keeps signals away from: this spawner, the daemon, and the daemon's parent (a one-file
    binary's bootloader, or whoever started the agent) with the daemon's process group where it differs."""
    daemon = os.getppid()
    protected = [os.getpid(), daemon]
    try:
        with open(f"/proc/{daemon}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        above, group = int(fields[1]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return protected
    protected += [pid for pid in (above, group) if pid > 1 and pid not in protected]
    return protected[: seccomp.MAX_PROTECTED]


def filter_system_calls() -> str:
    """Install the seccomp filter; what to report (``refused`` or why it is not available)."""
    try:
        seccomp.install(protected=agents_own_processes())
    except OSError as exc:
        return f"not available: {exc}"
    return "refused"


def command_setup(enter_layer: Callable[[], None] | None) -> Callable[[], None]:
    """What runs in each command's process before it executes the shell: limits, then its own Landlock layer."""
    def setup() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        if hard == resource.RLIM_INFINITY or hard > MAX_FILE_BYTES:
            resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
        if enter_layer is not None:
            enter_layer()
    return setup


def _failure(exc: OSError) -> dict:
    return {"ok": False, "errno": exc.errno or errno_codes.EIO, "error": exc.strerror or str(exc)}


def serve(sock: socket.socket, sandbox: SpawnerSandbox) -> None:
    """Answer requests until the daemon closes its end."""
    while True:
        try:
            request = receive(sock)
        except ChannelClosed:
            return
        op = request.get("op")
        try:
            if op == "exec":
                reply = {"ok": True, **sandbox.exec(request["command"], request.get("timeout_s")).as_dict()}
            elif op == "read_file":
                reply = {"ok": True, "content": sandbox.read_file(request["path"])}
            elif op == "write_file":
                sandbox.write_file(request["path"], request["content"])
                reply = {"ok": True}
            elif op == "start_job":
                reply = {"ok": True, "job": sandbox.start_job(request["command"]).as_dict()}
            elif op == "stop_job":
                reply = {"ok": True, "job": sandbox.jobs.stop(request["id"]).as_dict()}
            elif op == "jobs":
                reply = {"ok": True, "jobs": [job.as_dict() for job in sandbox.jobs.listing()]}
            else:
                reply = {"ok": False, "errno": errno_codes.EINVAL, "error": f"unknown operation {op!r}"}
        except Cancelled:  # LocalSandbox.exec ended the command's whole process group on the way out
            reply = {"ok": False, "errno": errno_codes.ECANCELED, "error": "cancelled: the agent is stopping"}
        except OSError as exc:
            reply = _failure(exc)
        except ValueError as exc:
            reply = {"ok": False, "errno": errno_codes.EINVAL, "error": str(exc)}
        if op == "exec":
            sandbox.end_leftovers()  # whatever the command left behind, setsid'd or not, ends with its call
        send(sock, reply)
        reaper.reap()


def main(fd: int) -> int:
    """Entry point in the fresh process: read the setup message, confine, report, serve."""
    sock = socket.socket(fileno=fd)
    reaper.become_subreaper()  # orphans of commands come to us
    setup = receive(sock)
    plan = Plan.from_args(setup["plan"])
    oom = OomScore()  # opened before Landlock closes /proc
    try:
        report, enter_layer = confine(plan, setup["method"])
    except (OSError, ValueError) as exc:
        send(sock, {"ok": False, "error": str(exc)})
        return 1
    report.update(unix_sockets=filter_system_calls(), oom_first=oom.raised())
    oom.restore()
    signal.signal(signal.SIGTERM, _cancel)
    send(sock, {"ok": True, **report, "pid": os.getpid()})
    sandbox = SpawnerSandbox(plan.workspace, tmpdir=plan.tmp, child_setup=command_setup(enter_layer),
                             max_output_bytes=int(setup.get("max_output_bytes", 64 * 1024)), oom=oom)
    trim_heap()  # what start-up freed goes back: the spawner waits for its first request
    try:
        serve(sock, sandbox)
    finally:
        reaper.end_descendants()  # background jobs die with the spawner, not outlive the agent
        try:
            remove_tree(plan.tmp)
        except OSError:
            pass  # the daemon removes what is left when the spawner has gone
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))

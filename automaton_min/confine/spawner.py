"""The confined spawner: one small process that runs the agent's commands and file operations.

The daemon starts it once (a fresh interpreter with a bare environment, so it holds no
secret in memory or in ``/proc/<pid>/environ``), hands it the plan over a socket pair,
and the spawner confines itself before it answers: Landlock (or the namespace fallback).
Every command it starts enters one more Landlock layer of its own, so commands cannot
ptrace or signal the spawner either. Everything it needs is imported before it confines
itself: afterwards the package's own directory may be out of reach.

SIGTERM cancels the command under way (its process group is killed) and the spawner
goes on serving; it ends when the daemon closes the channel.

Requests: ``{"op": "exec", "command", "timeout_s"}``, ``{"op": "read_file", "path"}``,
``{"op": "write_file", "path", "content"}``; replies ``{"ok": true, ...}`` or
``{"ok": false, "errno", "error"}``.
"""

from __future__ import annotations

import errno as errno_codes
import os
import shutil
import signal
import socket
import sys

from automaton_min.confine import caps, landlock, namespace
from automaton_min.confine.libc import PR_SET_CHILD_SUBREAPER, prctl
from automaton_min.confine.plan import Plan
from automaton_min.confine.wire import ChannelClosed, receive, send
from automaton_min.conway.local import LocalSandbox  # with everything exec needs (subprocess, selectors, codecs)



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


def confine(plan: Plan, method: str) -> tuple[dict, object]:
    """Confine this process by ``method``; returns what to report and the per-command setup function."""
    plan.workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
    if method == "landlock":
        # Landlock does not govern chmod or (before ABI 3) truncate, so where a user namespace can be had the
        # home is also hidden: then nothing of it can even be named.
        try:
            namespace.hide_home(plan.home, plan.workspace, plan.tmp / ".workspace-mount")
            hidden = True
        except OSError:
            hidden = False
        abi = landlock.abi_version()
        ruleset = landlock_ruleset(plan, abi)
        caps.drop_all()
        ruleset.restrict_self()
        report = {"method": "landlock", "abi": abi, "scoped": bool(ruleset.scoped), "home_hidden": hidden}
        return report, ruleset.restrict_self
    if method == "namespace":
        namespace.hide_home(plan.home, plan.workspace, plan.tmp / ".workspace-mount")
        refused = namespace.read_only_except([plan.workspace, plan.tmp])
        caps.drop_all()
        landlock.set_no_new_privs()
        return {"method": "namespace", "read_only_refused": refused}, None
    raise ValueError(f"unknown confinement method {method!r}")


class Cancelled(Exception):
    """SIGTERM from the daemon (the agent is stopping): the command under way is ended, the spawner goes on."""


def _cancel(signum, frame) -> None:
    raise Cancelled()


def _descendants() -> list[int]:
    """This process's children (orphans of its commands included: it is their subreaper)."""
    found = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children", encoding="ascii") as handle:
                found += [int(pid) for pid in handle.read().split()]
        except OSError:
            continue
    return found


def _reap() -> None:
    """Collect adopted orphans that have exited, so none stays a zombie."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _end_everything() -> None:
    """At the end: background jobs the agent started die with the spawner, not outlive the agent."""
    for _ in range(3):  # a dying process may leave orphans that come to us
        pids = _descendants()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _failure(exc: OSError) -> dict:
    return {"ok": False, "errno": exc.errno or errno_codes.EIO, "error": exc.strerror or str(exc)}


def serve(sock: socket.socket, sandbox: LocalSandbox) -> None:
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
            else:
                reply = {"ok": False, "errno": errno_codes.EINVAL, "error": f"unknown operation {op!r}"}
        except Cancelled:  # LocalSandbox.exec ended the command's whole process group on the way out
            reply = {"ok": False, "errno": errno_codes.ECANCELED, "error": "cancelled: the agent is stopping"}
        except OSError as exc:
            reply = _failure(exc)
        except ValueError as exc:
            reply = {"ok": False, "errno": errno_codes.EINVAL, "error": str(exc)}
        send(sock, reply)
        _reap()


def main(fd: int) -> int:
    """Entry point in the fresh process: read the setup message, confine, report, serve."""
    sock = socket.socket(fileno=fd)
    prctl(PR_SET_CHILD_SUBREAPER, 1, "prctl(PR_SET_CHILD_SUBREAPER)")  # orphaned background jobs come to us
    setup = receive(sock)
    plan = Plan.from_args(setup["plan"])
    try:
        report, child_setup = confine(plan, setup["method"])
    except (OSError, ValueError) as exc:
        send(sock, {"ok": False, "error": str(exc)})
        return 1
    signal.signal(signal.SIGTERM, _cancel)
    send(sock, {"ok": True, **report, "pid": os.getpid()})
    sandbox = LocalSandbox(plan.workspace, tmpdir=plan.tmp, child_setup=child_setup,
                           max_output_bytes=int(setup.get("max_output_bytes", 64 * 1024)))
    try:
        serve(sock, sandbox)
    finally:
        _end_everything()
        shutil.rmtree(plan.tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))

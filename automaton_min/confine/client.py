"""The daemon's side of confinement: start the spawner, choose the method, and use it as the local sandbox.
``local_sandbox`` tries the methods in ``execConfinement``'s order; when none works, commands are refused
(``RefusingSandbox``) unless ``unconfinedExec`` is set.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from automaton_min.confine import reaper
from automaton_min.confine.cgroups import CommandGroup, Unavailable, commands_group
from automaton_min.confine.namespace import protect_daemon
from automaton_min.confine.plan import make_plan
from automaton_min.confine.wire import ChannelClosed, receive, send
from automaton_min.conway.local import ENV_PASSTHROUGH, ExecResult, LocalSandbox, PortInfo, resolve_in
from automaton_min.errors import RuntimeFailure
from automaton_min.log import get_logger
from automaton_min.trees import remove_tree

log = get_logger(__name__)

_ERRORS = {errno.ENOENT: FileNotFoundError, errno.EACCES: PermissionError, errno.EPERM: PermissionError}
METHODS = {"auto": ("landlock", "namespace"), "landlock": ("landlock",), "namespace": ("namespace",)}
START_TIMEOUT_S = 30.0
CLOSE_WAIT_S = 5.0  # for the spawner to end its commands and remove its temp dir once the channel closes
TEMP_PREFIX = "automaton-exec-"  # then the daemon's pid: a dead daemon's temp dir can be told and removed
REPLY_SLACK_S = 15.0  # beyond a command's own timeout, for the spawner to end its group and answer
SPAWNER_FLAG = "__confined-spawner__"  # a frozen binary's hidden entry point (its entry script: the build's spec)
UNCONFINED_FIX = 'set "unconfinedExec": true in automaton.json to run them unconfined (not recommended)'


class ConfinementUnavailable(RuntimeFailure):
    """No confinement method worked on this machine."""


def _remove_stale_temp_dirs() -> None:
    """Temp dirs an agent that died without its clean-up (SIGKILL, a crash) left behind: this user's, whose
    daemon no longer runs."""
    for stale in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*-*"):
        pid = stale.name.removeprefix(TEMP_PREFIX).split("-", 1)[0]
        try:
            if not pid.isdigit() or Path(f"/proc/{pid}").exists() or stale.lstat().st_uid != os.geteuid():
                continue
            remove_tree(stale)
        except OSError as exc:
            log.warning("a dead agent's temp dir could not be removed", extra={"path": str(stale), "error": str(exc)})


def spawner_argv(fd: int) -> list[str]:
    """How to start the spawner: a frozen binary runs itself with a hidden flag, otherwise ``python -I -m``."""
    if getattr(sys, "frozen", False):
        return [running_binary(), SPAWNER_FLAG, str(fd)]
    return [sys.executable, "-I", "-m", "automaton_min.confine.spawner", str(fd)]


def spawner_env() -> dict[str, str]:
    """A bare environment: no keys, no AUTOMATON_*; PyInstaller's own variables so a one-file binary reuses its
    unpacked bundle instead of unpacking again."""
    env = {name: os.environ[name] for name in (*ENV_PASSTHROUGH, "LD_LIBRARY_PATH") if os.environ.get(name)}
    env["PATH"] = os.environ.get("PATH") or os.defpath
    env.update({k: v for k, v in os.environ.items() if k.startswith("_PYI_") or k == "_MEIPASS2"})
    if "_PYI_ARCHIVE_FILE" in env:  # where the bootloader reads the bundle from: the bytes this process runs
        env["_PYI_ARCHIVE_FILE"] = running_binary()
    return env


def running_binary() -> str:
    """The program this frozen process runs: the unpacked bundle's executable, which stays while it runs."""
    return sys.executable


# Landlock before ABI 6 does not scope signals: the seccomp filter (when it holds) keeps them from the agent's own
# processes, nothing keeps them from the user's others.
_UNSCOPED = {True: "signals kept only from the agent's own processes (Landlock ABI < 6)",
             False: "signals NOT scoped (Landlock ABI < 6: commands can signal the user's processes)"}


class ConfinedSandbox:
    """Runs commands and file operations in the confined spawner. Same interface as ``LocalSandbox``."""

    is_local = True
    confined = True  # files are looked at only from inside the confinement, never by the daemon

    def __init__(self, home: Path, workspace: Path, method: str, *, max_output_bytes: int = 64 * 1024,
                 own_cgroup: bool = False) -> None:
        self.home = Path(home)
        self.workspace = Path(workspace).expanduser().absolute()
        self.method = method
        self.max_output_bytes = max_output_bytes
        self.report: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._tmp: Path | None = None
        self.own_cgroup = own_cgroup
        self._group: CommandGroup | None = None
        self.cgroup = "not asked for" if not own_cgroup else "not made yet"

    def __repr__(self) -> str:
        return f"ConfinedSandbox({str(self.workspace)!r}, {self.describe()!r})"

    def describe(self) -> str:
        """One line for banners, ``status`` and ``doctor``: which confinement holds the commands."""
        method = self.report.get("method", self.method)
        parts = [f"ABI {self.report.get('abi')}"] if method == "landlock" else []
        if method == "landlock":
            sockets = self.report.get("unix_sockets") == "refused"
            parts.append("signals and abstract sockets scoped" if self.report.get("scoped") else _UNSCOPED[sockets])
        if self.report.get("home_hidden"):
            parts.append("home hidden")
        if self.report:
            parts.append("read-only outside the workspace" if self.report.get("read_only") else
                         "modes and times outside the workspace NOT protected")
        if self.report.get("unix_sockets") == "refused":
            parts.append("no unix sockets")
        return f"{method} ({', '.join(parts)})" if parts else method

    def host_files(self) -> str:
        """One line: which way keeps commands from changing files outside the workspace and temp dir, or why none."""
        way = self.report.get("read_only")
        if not way:
            return f"NOT read-only to commands: no mount namespace here ({self.report.get('not_read_only', 'unknown')})"
        how = "a user + mount namespace" if way == "user namespace" else "a mount namespace: root, no user one"
        left = self.report.get("read_only_refused")
        return (f"read-only to commands outside the workspace and temp dir ({how})"
                + (f"; but {', '.join(left)} stayed WRITABLE" if left else ""))

    def limits(self) -> str:
        """One line: what bounds the commands besides the confinement (the OOM score, rlimits, the cgroup)."""
        oom = "OOM killer's first choice" if self.report.get("oom_first") else "OOM score not set (/proc refused it)"
        return f"{oom}; no core files, files up to 1 GiB; {self.cgroup}"

    # ------------------------------------------------------------------ the spawner process

    def start(self) -> "ConfinedSandbox":
        """Start the spawner and wait until it has confined itself; raises ``ConfinementUnavailable`` if it cannot."""
        return self.launch().ready()

    def launch(self) -> "ConfinedSandbox":
        """Start the spawner and send it the plan; ``ready`` waits for its report (the daemon goes on meanwhile)."""
        self.workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.report = {}
        _remove_stale_temp_dirs()
        self._tmp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-"))
        plan = make_plan(self.home, self.workspace, self._tmp)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = subprocess.Popen(
                spawner_argv(theirs.fileno()), pass_fds=(theirs.fileno(),), env=spawner_env(), cwd="/",
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
                start_new_session=True)  # Ctrl-C at the terminal is for the daemon, which then finishes its turn
        finally:
            theirs.close()
        self._join_group(self._proc.pid)  # before it starts anything: every command lands in the group too
        self._sock = ours
        ours.settimeout(START_TIMEOUT_S)
        try:
            send(ours, {"plan": plan.as_args(), "method": self.method, "max_output_bytes": self.max_output_bytes})
        except OSError as exc:
            self.report = {"ok": False, "error": f"the spawner did not start: {exc}"}
        return self

    def ready(self) -> "ConfinedSandbox":
        """Wait for the launched spawner's report; ``ConfinementUnavailable`` (all cleaned up) if it is not confined."""
        try:
            report = self.report or receive(self._sock)
        except (OSError, ValueError) as exc:
            report = {"ok": False, "error": f"the spawner did not start: {exc}"}
        if not report.get("ok"):
            self.close()
            raise ConfinementUnavailable(f"{self.method} confinement failed: {report.get('error')}")
        self.report = report
        return self

    def close(self) -> None:
        """Stop the spawner (closing the channel ends it), end every process below it, remove the temp dir."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                self._end_spawner()
        self._end_orphans()
        if self._group is not None:
            try:
                self._group.remove()
            except OSError as exc:
                log.warning("the commands' cgroup could not be removed", extra={"error": str(exc)})
            self._group = None
        if self._tmp is not None:
            try:
                remove_tree(self._tmp)
            except OSError as exc:
                log.warning("the confined spawner's temp dir could not be removed entirely",
                            extra={"path": str(self._tmp), "error": str(exc)})
            self._tmp = None

    def _join_group(self, pid: int) -> None:
        """Put the new spawner in the commands' cgroup (made on first use); where none can be had, say why."""
        if not self.own_cgroup:
            return
        if self._group is None:
            made = commands_group()
            if isinstance(made, Unavailable):
                self.cgroup = f"none: {made.reason}"
                return
            self._group = made
        try:
            self._group.add(pid)
        except OSError as exc:
            self.cgroup = f"none: {exc}"
            return
        self.cgroup = self._group.describe()

    def _end_spawner(self) -> None:
        """The spawner and everything below it, stopped and killed (it hangs, or will not end)."""
        if self._proc is None:
            return
        reaper.end_tree(self._proc.pid, include_root=True, reap_any=False)
        try:
            self._proc.wait(timeout=CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            log.warning("the confined spawner did not end after SIGKILL", extra={"pid": self._proc.pid})
        self._proc = None

    def _end_orphans(self) -> None:
        """Commands of a spawner that died came to this process if it is their subreaper (``automaton-min run``):
        everything below it but the spawner in use ends too."""
        if reaper.is_subreaper():
            alive = [self._proc.pid] if self._proc is not None and self._proc.poll() is None else []
            reaper.end_tree(os.getpid(), spare=alive)

    def cancel(self) -> None:
        """End the command under way, if any (the agent is stopping); its ``exec`` returns an error."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)

    @property
    def spawner_pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _restore_modes(self) -> None:
        """Owner access to the workspace and the home, which a command may have taken away (Landlock does not
        govern chmod): without it no tool, in this run or the next, could work again."""
        for directory in (self.home, self.workspace):
            try:
                mode = os.stat(directory).st_mode
                if mode & 0o700 != 0o700:
                    os.chmod(directory, (mode | 0o700) & 0o7777)
                    log.warning("a command had taken away the owner's access to a directory; restored",
                                extra={"path": str(directory), "mode": oct(mode & 0o7777)})
            except OSError as exc:
                log.warning("cannot restore access to a directory", extra={"path": str(directory), "error": str(exc)})

    def _call(self, request: dict, wait_s: float) -> dict:
        self._restore_modes()
        with self._lock:
            if self._sock is None or (self._proc is not None and self._proc.poll() is not None):
                self.close()
                self.start()  # the spawner died between requests: a new one, confined the same way
            assert self._sock is not None
            self._sock.settimeout(wait_s)
            try:
                send(self._sock, request)
                reply = receive(self._sock)
            except (OSError, ChannelClosed, ValueError) as exc:
                self._end_spawner()  # it hangs or died: no reply will come, and nothing it ran may stay behind
                self.close()
                raise RuntimeFailure(f"the confined spawner stopped answering ({exc}); "
                                     "it is restarted on the next call") from None
        if not reply.get("ok"):
            code = int(reply.get("errno") or errno.EIO)
            raise _ERRORS.get(code, OSError)(code, reply.get("error"))
        return reply

    # ------------------------------------------------------------------ the sandbox interface

    def exec(self, command: str, timeout_s: float | None = None) -> ExecResult:
        timeout = 30.0 if timeout_s is None else float(timeout_s)
        if timeout <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        reply = self._call({"op": "exec", "command": command, "timeout_s": timeout}, timeout + REPLY_SLACK_S)
        return ExecResult(reply["stdout"], reply["stderr"], reply["exit_code"], reply["timed_out"], reply["truncated"])

    def resolve(self, path: str) -> Path:
        return resolve_in(self.workspace, path)

    def read_file(self, path: str) -> str:
        return self._call({"op": "read_file", "path": path}, START_TIMEOUT_S)["content"]

    def write_file(self, path: str, content: str) -> None:
        self._call({"op": "write_file", "path": path, "content": content}, START_TIMEOUT_S)

    def start_job(self, command: str) -> dict:
        """Start ``command`` as a background job (``confine/jobs.py``); the job as the spawner describes it."""
        return self._call({"op": "start_job", "command": command}, START_TIMEOUT_S)["job"]

    def stop_job(self, job_id: str) -> dict:
        return self._call({"op": "stop_job", "id": job_id}, START_TIMEOUT_S)["job"]

    def jobs(self) -> list[dict]:
        return self._call({"op": "jobs"}, START_TIMEOUT_S)["jobs"]

    def expose_port(self, port: int) -> PortInfo:
        return PortInfo(int(port), f"http://localhost:{int(port)}")

    def remove_port(self, port: int) -> None:
        return None


class RefusingSandbox(LocalSandbox):
    """Local mode on a machine with no working confinement: files as usual, commands refused."""

    def __init__(self, workspace: Path, why: str) -> None:
        super().__init__(workspace)
        self.why = why

    def describe(self) -> str:
        return "none: local commands refused"

    def exec(self, command: str, timeout_s: float | None = None) -> ExecResult:
        raise RuntimeFailure(f"local commands are refused: {self.why}; {UNCONFINED_FIX}")


class UnconfinedSandbox(LocalSandbox):
    """No working confinement, and commands still run: the user chose it (``unconfinedExec``), or the machine is a
    Conway sandbox. The policy's short list of forbidden commands guards them."""

    def __init__(self, workspace: Path, why: str = "unconfinedExec is set") -> None:
        super().__init__(workspace)
        self.why = why

    def describe(self) -> str:
        return f"none ({self.why})"


def launch(home: Path, workspace: Path, config: Any, *, own_cgroup: bool = False) -> ConfinedSandbox:
    """The first method's spawner, started now; ``local_sandbox`` given it as ``launched`` waits for it."""
    protect_daemon()
    method = METHODS[config.get("execConfinement") or "auto"][0]
    return ConfinedSandbox(home, workspace, method, own_cgroup=own_cgroup).launch()


def local_sandbox(home: Path, workspace: Path, config: Any, *, own_cgroup: bool = False, disposable: bool = False,
                  launched: ConfinedSandbox | None = None) -> ConfinedSandbox | LocalSandbox:
    """The local sandbox for this agent: confined by the first method that works, else refused or (if allowed, or
    ``disposable``: this machine is a Conway sandbox, whose commands are the agent's only way to work) bare, where
    the policy's short list of forbidden commands applies. ``own_cgroup``: put the spawner and its commands in a
    cgroup of their own where one can be had."""
    protect_daemon()  # before any command exists: no core files, and /proc/<pid> needs a capability commands lack
    failures = []
    for method in METHODS[config.get("execConfinement") or "auto"]:
        try:
            sandbox = (launched.ready() if launched is not None and launched.method == method else
                       ConfinedSandbox(home, workspace, method, own_cgroup=own_cgroup).start())
        except ConfinementUnavailable as exc:
            failures.append(str(exc))
            continue
        log.debug("local commands are confined", extra={"confinement": sandbox.describe()})
        return sandbox
    why = "; ".join(failures) or "no confinement method"
    if config.get("unconfinedExec") or disposable:
        because = "unconfinedExec is set" if config.get("unconfinedExec") else "a Conway sandbox with no confinement"
        log.warning(f"local commands run UNCONFINED ({because})", extra={"why": why})
        return UnconfinedSandbox(workspace, because)
    log.error("local commands are refused: no confinement works here", extra={"why": why})
    return RefusingSandbox(workspace, why)

"""Local mode: the agent's commands and files on this machine, inside a workspace directory (README: Clients).

A timeout ends the command's whole process group (SIGTERM, then SIGKILL after a grace period). Output arriving after
the shell exited is collected only briefly. Unconfined, background jobs go on running; the confined spawner passes
``sweep``, which ends every process the call started, and bounds the wait for the shell itself.
"""

from __future__ import annotations

import codecs
import errno
import os
import selectors
import signal
import stat
import subprocess
import time
from collections import namedtuple
from collections.abc import Callable
from pathlib import Path

from automaton_min.fileio import atomic_write

ENV_PASSTHROUGH = ("LANG", "LC_ALL", "TZ", "TERM")
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024
DEFAULT_TIMEOUT_S = 30.0
KILL_GRACE_S = 1.0  # between SIGTERM and SIGKILL
LINGER_S = 0.25  # how long output is still collected after the shell exits with its pipes held open
DRAIN_AFTER_KILL_S = 0.5  # processes that left the group may hold the pipes forever
REAP_WAIT_S = 2.0  # with a sweep: how long the shell may take to be reported after SIGKILL (a tracer can delay it)
_CHUNK = 64 * 1024
_TICK_S = 0.05



class ExecResult(namedtuple("ExecResult", "stdout stderr exit_code timed_out truncated", defaults=(False, False))):
    """What a command did. ``exit_code`` is negative (minus the signal) when a signal ended it."""

    __slots__ = ()

    def as_dict(self) -> dict:
        return self._asdict()


PortInfo = namedtuple("PortInfo", "port public_url")

class _Capture:
    """The head of one output stream, at most ``limit`` bytes; the rest is only counted."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self) -> str:
        if not self.dropped:
            return self.kept.decode("utf-8", "replace")
        # A multi-byte character cut in half at the limit is left out rather than shown as a replacement mark.
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        head = decoder.decode(bytes(self.kept), final=False)
        hidden = self.dropped + len(decoder.getstate()[0])
        return f"{head}\n[output truncated: {hidden} more bytes not shown]"


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs. Zombies do not count: after their parent dies they wait
    for init to reap them, which in a container may take long or never happen."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # after the command name: state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class LocalSandbox:
    """Runs commands and touches files on this machine, rooted at ``workspace``."""

    is_local = True

    def __init__(
        self,
        workspace: Path,
        *,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
        kill_grace_s: float = KILL_GRACE_S,
        tmpdir: Path | None = None,
        child_setup: Callable[[], None] | None = None,
        sweep: Callable[[], object] | None = None,
    ) -> None:
        """``tmpdir`` becomes the commands' ``TMPDIR``; ``child_setup`` runs in each child before it executes
        the shell (the confined spawner enters a new Landlock layer there; it is single-threaded, so that is safe);
        ``sweep`` ends every process the command started, when its shell is slow to be reported after a kill."""
        if max_output_bytes < 0:
            raise ValueError("max_output_bytes must not be negative")
        self.workspace = Path(workspace).expanduser().absolute()
        self.max_output_bytes = max_output_bytes
        self.default_timeout_s = default_timeout_s
        self.kill_grace_s = kill_grace_s
        self.tmpdir = tmpdir
        self.child_setup = child_setup
        self.sweep = sweep

    def __repr__(self) -> str:
        return f"LocalSandbox({str(self.workspace)!r})"

    def _ensure_workspace(self) -> None:
        self.workspace.mkdir(mode=0o700, parents=True, exist_ok=True)

    def child_env(self) -> dict[str, str]:
        """The whole environment a command gets: an allowlist, never the runtime's own variables."""
        env = {name: os.environ[name] for name in ENV_PASSTHROUGH if os.environ.get(name)}
        env["PATH"] = os.environ.get("PATH") or os.defpath
        env["HOME"] = str(self.workspace)
        if self.tmpdir is not None:
            env["TMPDIR"] = str(self.tmpdir)
        return env

    # ------------------------------------------------------------------ exec

    def exec(self, command: str, timeout_s: float | None = None) -> ExecResult:
        """Run ``command`` with ``/bin/sh -c`` in the workspace; at most ``timeout_s`` seconds for the whole group."""
        timeout = self.default_timeout_s if timeout_s is None else float(timeout_s)
        if timeout <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        self._ensure_workspace()
        deadline = time.monotonic() + timeout
        out, err = _Capture(self.max_output_bytes), _Capture(self.max_output_bytes)
        proc = self._start(command)
        pgid = proc.pid  # a new session: the shell leads its own group
        timed_out = False
        selector = selectors.DefaultSelector()
        try:
            assert proc.stdout is not None and proc.stderr is not None
            selector.register(proc.stdout.fileno(), selectors.EVENT_READ, out)
            selector.register(proc.stderr.fileno(), selectors.EVENT_READ, err)

            # Until the pipes close or the shell exits (checked without reaping it, so its pid keeps naming the group).
            _read(selector, deadline, stop=lambda: _exited(proc))
            if _exited(proc):
                # The shell is done; collect what is still in (or on its way to) the pipes, briefly.
                _read(selector, min(deadline, time.monotonic() + LINGER_S))
            else:
                remaining = deadline - time.monotonic()
                if remaining > 0 and not selector.get_map():
                    # Pipes closed but the shell runs on (it closed its output): wait for it until the deadline.
                    try:
                        proc.wait(timeout=remaining)
                    except subprocess.TimeoutExpired:
                        timed_out = True
                else:
                    timed_out = True
            if timed_out:
                self._end_group(proc, pgid, selector)
            self._collect(proc)
        finally:
            if proc.returncode is None:  # interrupted (KeyboardInterrupt, an error above): leave nothing behind
                _signal_group(pgid, signal.SIGKILL)
                self._collect(proc)
            selector.close()
            proc.stdout.close()
            proc.stderr.close()
        return ExecResult(
            stdout=out.text(),
            stderr=err.text(),
            exit_code=proc.returncode,
            timed_out=timed_out,
            truncated=bool(out.dropped or err.dropped),
        )

    def _start(self, command: str) -> subprocess.Popen:
        """The shell for ``command``, in a session of its own, its output on pipes."""
        return subprocess.Popen(["/bin/sh", "-c", command], cwd=self.workspace, env=self.child_env(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, close_fds=True, preexec_fn=self.child_setup)

    def _collect(self, proc: subprocess.Popen) -> None:
        """Reap the shell. Without a sweep, as long as it takes; with one, briefly, then everything the call
        started is ended and the shell's status is taken if it came (a killed one that never reports is -9)."""
        if self.sweep is None:
            proc.wait()
            return
        try:
            proc.wait(timeout=REAP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.sweep()
            if proc.poll() is None:
                proc.returncode = -signal.SIGKILL

    def _end_group(self, proc: subprocess.Popen, pgid: int, selector: selectors.BaseSelector) -> None:
        """SIGTERM the group, wait up to the grace period for it to empty, then SIGKILL what is left."""
        _signal_group(pgid, signal.SIGTERM)
        grace_end = time.monotonic() + self.kill_grace_s
        while time.monotonic() < grace_end:
            _read(selector, min(grace_end, time.monotonic() + _TICK_S))
            proc.poll()  # reap the shell; the group id stays reserved while any member lives
            if not _group_alive(pgid):
                break
        if _group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)
        _read(selector, time.monotonic() + DRAIN_AFTER_KILL_S)

    # ------------------------------------------------------------------ files

    def resolve(self, path: str) -> Path:
        return resolve_in(self.workspace, path)

    def read_file(self, path: str, max_bytes: int = 1 << 20) -> str:
        """The file's text; at most ``max_bytes`` are read, and only from a regular file."""
        fd = os.open(self.resolve(path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            data = handle.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes")
        return data.decode("utf-8", "replace")

    def write_file(self, path: str, content: str) -> None:
        """Write atomically with mode 0600, creating parent directories (0700) as needed."""
        target = self.resolve(path)
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write(target, content.encode("utf-8"), 0o600)

    # ------------------------------------------------------------------ ports

    def expose_port(self, port: int) -> PortInfo:
        return PortInfo(int(port), f"http://localhost:{int(port)}")

    def remove_port(self, port: int) -> None:
        return None

    def describe(self) -> str:
        return "none (commands run unconfined)"

    def cancel(self) -> None:
        return None

    def close(self) -> None:
        return None


def resolve_in(workspace: Path, path: str) -> Path:
    """``~`` is the workspace (the commands' ``HOME``); relative paths are inside the workspace."""
    if path == "~" or path.startswith("~/"):
        resolved = workspace / path[2:]
    else:
        resolved = Path(path).expanduser()
    return resolved if resolved.is_absolute() else workspace / resolved


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the process has exited, without reaping it (``WNOWAIT``), so its pid stays reserved."""
    if proc.returncode is not None:
        return True
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _read(selector: selectors.BaseSelector, until: float, stop=None) -> None:
    """Copy pipe output into the captures until both pipes close, ``until`` passes, or ``stop()`` says so."""
    while selector.get_map():
        remaining = until - time.monotonic()
        if remaining <= 0 or (stop is not None and stop()):
            return
        for key, _ in selector.select(min(remaining, _TICK_S)):
            try:
                chunk = os.read(key.fd, _CHUNK)
            except BlockingIOError:
                continue
            if chunk:
                key.data.feed(chunk)
            else:
                selector.unregister(key.fd)

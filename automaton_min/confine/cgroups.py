"""The commands' cgroup, where one can be had: limits the daemon does not share, one place to kill them all.

v1 or hybrid: a child ``automaton-commands-<pid>`` of this process's cgroup in the writable memory and pids
hierarchies. Pure v2: only a delegated leaf (writable, this process its only member); the process moves into a
``daemon`` child, ``+memory +pids`` are enabled, the commands get ``commands``. A failed step undoes those before it;
``CommandGroup.remove`` undoes all. Commands get the lowest limit above less the daemon's share (half that limit when
it is under twice the share); no limit above, none.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

DAEMON_MEMORY_BYTES = 96 << 20
DAEMON_TASKS = 64
V2_CONTROLLERS = ("memory", "pids")
KILL_WITHIN_S = 5.0
REMOVE_WITHIN_S = 5.0
GROUP_PREFIX = "automaton-commands-"  # v1: followed by the daemon's pid, so a dead daemon's group can be told
_FIRST_PAUSE_S = 0.001
_LONGEST_PAUSE_S = 0.05
# v1 shows "no limit" as PAGE_COUNTER_MAX pages: LONG_MAX bytes (64-bit kernels) or LONG_MAX pages (32-bit), at
# least this much; no real limit is that large.
_V1_NO_LIMIT_BYTES = ((1 << 31) - 1) * os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Unavailable:
    """No cgroup for the commands, and why."""

    reason: str

    def describe(self) -> str:
        return f"no cgroup for commands: {self.reason}"


@dataclass(frozen=True)
class CommandGroup:
    """The commands' cgroup: its directory in each hierarchy (v1: memory, then pids; v2: the one) and its limits."""

    version: int
    paths: tuple[Path, ...]
    memory_max: int | None
    tasks_max: int | None
    _undo: ExitStack = field(default_factory=ExitStack, repr=False, compare=False)

    def add(self, pid: int) -> None:
        """Move ``pid`` (the whole process) into the group, in every hierarchy."""
        for path in self.paths:
            _write(path / "cgroup.procs", str(pid))

    def members(self) -> list[int]:
        """The processes in the group (none once it is removed)."""
        return sorted(set().union(*(_procs(path) for path in self.paths)))

    def kill_all(self, within_s: float = KILL_WITHIN_S) -> None:
        """SIGKILL every member, and what they fork meanwhile, and wait until the group is empty; bounded by
        ``within_s`` (what is still there then, say in an uninterruptible sleep, shows in ``members``)."""
        deadline = time.monotonic() + within_s
        kill_file = self.paths[0] / "cgroup.kill"
        if self.version == 2 and kill_file.exists():
            _write(kill_file, "1")
            _wait_unpopulated(self.paths[0], deadline)
        else:
            _kill_members(self.members, deadline)

    def remove(self) -> None:
        """Kill every member, remove the group's directories and undo what making it did (v2: this process goes
        back to its own cgroup). Raises ``OSError`` when a directory stays busy past ``REMOVE_WITHIN_S``."""
        try:
            self.kill_all()
        finally:
            self._undo.close()

    def describe(self) -> str:
        memory = "no limit" if self.memory_max is None else f"{self.memory_max >> 20} MiB"
        tasks = "no limit" if self.tasks_max is None else str(self.tasks_max)
        return f"cgroup v{self.version}: memory {memory}, tasks {tasks} for commands"


@dataclass(frozen=True)
class _Hierarchy:
    """A mounted cgroup hierarchy: where, and which cgroup its mount shows at the top (in a container without a
    cgroup namespace, the container's own, not ``/``)."""

    mount_point: Path
    root: str

    def directory(self, cgroup: str) -> Path | None:
        """The directory of ``cgroup`` (a path as ``/proc/<pid>/cgroup`` shows it); None when not under this mount."""
        relative = os.path.relpath(cgroup, self.root)
        return None if relative.startswith("..") else self.mount_point / relative


def commands_share(parent_limit: int | None, daemon_keeps: int) -> int | None:
    """The commands' part of ``parent_limit``: all but what the daemon keeps, or half of it when that would leave
    the commands less than the daemon; none without a limit."""
    if parent_limit is None:
        return None
    if parent_limit < 2 * daemon_keeps:
        return parent_limit // 2
    return parent_limit - daemon_keeps


def commands_group(own_pid: int | None = None) -> CommandGroup | Unavailable:
    """A new cgroup for commands below the cgroup of ``own_pid`` (this process), or why none can be had."""
    own_pid = os.getpid() if own_pid is None else own_pid
    try:
        v1, v2 = _hierarchies()
        if "memory" in v1:
            if "pids" not in v1:
                return Unavailable("memory is on a cgroup v1 hierarchy but pids is not")
            return _v1_group(v1["memory"], v1["pids"], own_pid)
        if v2 is not None:
            return _v2_group(v2, own_pid)
        return Unavailable("no cgroup hierarchy is mounted")
    except OSError as exc:
        return Unavailable(str(exc))


def _v1_group(memory: _Hierarchy, pids: _Hierarchy, own_pid: int) -> CommandGroup | Unavailable:
    own_dirs = []
    for controller, hierarchy in (("memory", memory), ("pids", pids)):
        own = hierarchy.directory(_own_cgroup(own_pid, controller))
        if own is None:
            return Unavailable(f"the {controller} cgroup of process {own_pid} is outside {hierarchy.mount_point}")
        if not os.access(own, os.W_OK):
            return Unavailable(f"{own} is not writable")
        own_dirs.append(own)
    own_memory, own_pids = own_dirs
    memory_max = commands_share(
        _effective_limit(own_memory, memory.mount_point, "memory.limit_in_bytes"), DAEMON_MEMORY_BYTES)
    tasks_max = commands_share(_effective_limit(own_pids, pids.mount_point, "pids.max"), DAEMON_TASKS)
    name = f"{GROUP_PREFIX}{own_pid}"
    with ExitStack() as undo:
        for own in own_dirs:
            _remove_stale(own)
            (own / name).mkdir()
            undo.callback(_rmdir, own / name)
        group_memory, group_pids = own_memory / name, own_pids / name
        if memory_max is not None:
            _write(group_memory / "memory.limit_in_bytes", str(memory_max))
            if (group_memory / "memory.memsw.limit_in_bytes").exists():
                _write(group_memory / "memory.memsw.limit_in_bytes", str(memory_max))
        if tasks_max is not None:
            _write(group_pids / "pids.max", str(tasks_max))
        return CommandGroup(1, (group_memory, group_pids), _read_limit(group_memory / "memory.limit_in_bytes"),
                            tasks_max, undo.pop_all())


def _remove_stale(parent: Path) -> None:
    """Groups an agent that died without its clean-up (SIGKILL, a crash) left in ``parent``: their commands are
    killed and the groups removed. One whose pid runs again (reused) is left alone."""
    for stale in parent.glob(f"{GROUP_PREFIX}*"):
        pid = stale.name.removeprefix(GROUP_PREFIX)
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        try:
            _kill_members(lambda: _procs(stale), time.monotonic() + KILL_WITHIN_S)
            _rmdir(stale)
        except OSError:
            continue


def _v2_group(hierarchy: _Hierarchy, own_pid: int,
              controllers: tuple[str, ...] = V2_CONTROLLERS) -> CommandGroup | Unavailable:
    parent = hierarchy.directory(_own_cgroup(own_pid, ""))
    if parent is None:
        return Unavailable(f"the cgroup of process {own_pid} is outside {hierarchy.mount_point}")
    control_files = (parent, parent / "cgroup.procs", parent / "cgroup.subtree_control")
    if not all(os.access(path, os.W_OK) for path in control_files):
        return Unavailable(f"{parent} is not delegated to this process (not writable)")
    others = [pid for pid in _procs(parent) if pid != own_pid]
    if others:
        return Unavailable(f"{parent} is not a leaf of this process alone ({len(others)} other processes in it)")
    missing = sorted(set(controllers) - set(_read(parent / "cgroup.controllers").split()))
    if missing:
        return Unavailable(f"{', '.join(missing)} not available in {parent}")
    memory_max = commands_share(_effective_limit(parent, hierarchy.mount_point, "memory.max"), DAEMON_MEMORY_BYTES)
    tasks_max = commands_share(_effective_limit(parent, hierarchy.mount_point, "pids.max"), DAEMON_TASKS)
    daemon, commands = parent / "daemon", parent / "commands"
    with ExitStack() as undo:
        daemon.mkdir()
        undo.callback(_rmdir, daemon)
        # a cgroup with processes may not enable controllers for its children: the daemon moves out first
        _write(daemon / "cgroup.procs", str(own_pid))
        undo.callback(_move_all, daemon, parent)
        enabled = [name for name in controllers if name not in _read(parent / "cgroup.subtree_control").split()]
        if enabled:
            _write(parent / "cgroup.subtree_control", " ".join(f"+{name}" for name in enabled))
            undo.callback(_write, parent / "cgroup.subtree_control", " ".join(f"-{name}" for name in enabled))
        commands.mkdir()
        undo.callback(_rmdir, commands)
        if memory_max is not None:
            _write(commands / "memory.max", str(memory_max))
        if (commands / "memory.swap.max").exists():
            _write(commands / "memory.swap.max", "0")
        if tasks_max is not None:
            _write(commands / "pids.max", str(tasks_max))
        return CommandGroup(2, (commands,), _read_limit(commands / "memory.max"), tasks_max, undo.pop_all())


def _hierarchies() -> tuple[dict[str, _Hierarchy], _Hierarchy | None]:
    """The mounted v1 hierarchies by controller (and ``name=`` option), and the v2 one (None when not mounted)."""
    v1: dict[str, _Hierarchy] = {}
    v2: _Hierarchy | None = None
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            mount, _, filesystem = line.partition(" - ")
            fields, (fs_type, _source, options) = mount.split(" "), filesystem.split(" ")[:3]
            hierarchy = _Hierarchy(Path(fields[4]), fields[3])
            if fs_type == "cgroup2" and v2 is None:
                v2 = hierarchy
            elif fs_type == "cgroup":
                for option in options.strip().split(","):
                    v1.setdefault(option, hierarchy)
    return v1, v2


def _own_cgroup(pid: int, controller: str) -> str:
    """The cgroup of ``pid`` in the v1 hierarchy holding ``controller``, or in the v2 one for ``""``."""
    with open(f"/proc/{pid}/cgroup", encoding="utf-8") as handle:
        for line in handle:
            hierarchy_id, controllers, path = line.rstrip("\n").split(":", 2)
            if (controller in controllers.split(",")) if controller else (hierarchy_id == "0"):
                return path
    raise OSError(errno.ENOENT, f"process {pid} is in no {controller or 'v2'} cgroup")


def _effective_limit(directory: Path, top: Path, limit_file: str) -> int | None:
    """The lowest ``limit_file`` from ``directory`` up to ``top``; None when none of them sets one."""
    limits = []
    for path in (directory, *directory.parents):
        limit = _read_limit(path / limit_file)
        if limit is not None:
            limits.append(limit)
        if path == top:
            break
    return min(limits, default=None)


def _read_limit(path: Path) -> int | None:
    """A limit file's value; None for no limit (``max``, v1's huge value, or no such file, as in a root cgroup)."""
    try:
        text = _read(path).strip()
    except FileNotFoundError:
        return None
    if text == "max" or int(text) >= _V1_NO_LIMIT_BYTES:
        return None
    return int(text)


def _read(path: Path) -> str:
    with open(path, encoding="ascii") as handle:
        return handle.read()


def _write(path: Path, text: str) -> None:
    """One write of ``text`` to a cgroup file; an error names the file and what was written."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode("ascii"))
    except OSError as exc:
        raise OSError(exc.errno, f"writing {text!r} to {path}: {exc.strerror}") from exc
    finally:
        os.close(fd)


def _procs(path: Path) -> list[int]:
    """The processes in the cgroup at ``path``; none when it is gone."""
    try:
        return [int(pid) for pid in _read(path / "cgroup.procs").split()]
    except FileNotFoundError:
        return []


def _move_all(source: Path, target: Path) -> None:
    for pid in _procs(source):
        try:
            _write(target / "cgroup.procs", str(pid))
        except ProcessLookupError:
            continue


def _rmdir(path: Path, within_s: float = REMOVE_WITHIN_S) -> None:
    """Remove a cgroup's directory, waiting out EBUSY (a member that has exited but is not yet unlinked from it)
    for at most ``within_s``."""
    backoff = _Backoff(time.monotonic() + within_s)
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or not backoff.wait():
                raise


def _kill_members(members: Callable[[], list[int]], deadline: float) -> None:
    """SIGKILL every member until none is left (a member's new child is a member too) or the deadline passes."""
    backoff = _Backoff(deadline)
    killed: list[int] = []
    while members_now := members():
        # the same members again: killed and exited, but not yet unlinked, and for that the kernel gives no event
        if members_now == killed and not backoff.wait():
            return
        if time.monotonic() >= deadline:
            return
        _kill_and_wait(members_now, deadline)
        killed = members_now


def _kill_and_wait(pids: list[int], deadline: float) -> None:
    """SIGKILL each of ``pids`` and wait, on their pidfds, until all have exited or the deadline passes. Without
    pidfds (kernels before 5.3, or no file descriptor left) the signal is sent by pid and nothing is waited for."""
    poller = select.poll()
    pidfds: list[int] = []
    try:
        for pid in pids:
            pidfd = _kill(pid)
            if pidfd is not None:
                pidfds.append(pidfd)
                poller.register(pidfd, select.POLLIN)
        waiting = len(pidfds)
        while waiting and (left_s := deadline - time.monotonic()) > 0:
            for pidfd, _ in poller.poll(left_s * 1000):
                poller.unregister(pidfd)
                waiting -= 1
    finally:
        for pidfd in pidfds:
            os.close(pidfd)


def _kill(pid: int) -> int | None:
    """SIGKILL ``pid``; a pidfd that becomes readable when it has exited, or None (gone, or no pidfds)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except OSError as exc:
        if exc.errno not in (errno.ENOSYS, errno.EMFILE, errno.ENFILE):
            raise
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return None
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        os.close(pidfd)
        return None
    return pidfd


def _wait_unpopulated(path: Path, deadline: float) -> None:
    """Until the v2 cgroup at ``path`` holds no process (``cgroup.events``: the kernel signals each change with
    POLLPRI) or the deadline passes."""
    with open(path / "cgroup.events", "rb", buffering=0) as events:
        poller = select.poll()
        poller.register(events, select.POLLPRI)
        while b"populated 1" in events.read() and (left_s := deadline - time.monotonic()) > 0:
            poller.poll(left_s * 1000)
            events.seek(0)


class _Backoff:
    """Pauses for polling what the kernel gives no event for: 1 ms, doubling up to 50 ms, never past a deadline."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.pause_s = _FIRST_PAUSE_S
        self._never = threading.Event()

    def wait(self) -> bool:
        """Pause once; False, without pausing, once the deadline has passed."""
        left_s = self.deadline - time.monotonic()
        if left_s <= 0:
            return False
        self._never.wait(min(self.pause_s, left_s))
        self.pause_s = min(self.pause_s * 2, _LONGEST_PAUSE_S)
        return True

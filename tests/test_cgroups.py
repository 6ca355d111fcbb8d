"""The commands' cgroup (``confine/cgroups.py``) on real cgroups.

Each test makes a parent cgroup below this process's own, with known limits, and runs a helper inside it (this
file run as a script: ``python tests/test_cgroups.py <scenario>``), which makes the commands' group there and
reports in JSON. The v1 tests need root and the v1 memory and pids hierarchies (as on a hybrid system). The v2
steps (moving into a ``daemon`` leaf, ``cgroup.kill``, undoing) run on the v2 hierarchy without its controllers:
in hybrid mode it has none, so its limits cannot be tested here. Every cgroup a test makes is killed empty and
removed afterwards, whatever the outcome.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from automaton_min.confine import cgroups, reaper
from automaton_min.confine.cgroups import DAEMON_MEMORY_BYTES, DAEMON_TASKS, CommandGroup, commands_group, \
    commands_share

MiB = 1 << 20
REPO = Path(__file__).resolve().parents[1]
HELPER_TIMEOUT_S = 60
CLEAN_UP_WITHIN_S = 10.0
_serial = itertools.count()

# A command tree: a plain child and a setsid'd one (Popen returns once each has exec'd), then it waits.
TREE = """\
import subprocess
plain = subprocess.Popen(["sleep", "300"])
detached = subprocess.Popen(["sleep", "300"], start_new_session=True)
print(plain.pid, detached.pid, flush=True)
plain.wait()
"""

# Forks idle children until the pids limit refuses one, then says how many it made and waits.
STORM = """\
import os, signal
children = 0
try:
    while True:
        if os.fork() == 0:
            signal.pause()
            os._exit(0)
        children += 1
except BlockingIOError:
    print(children, flush=True)
    signal.pause()
"""


@dataclass(frozen=True)
class ParentCgroup:
    """A test's cgroup, one directory per hierarchy, that helpers are started in."""

    paths: tuple[Path, ...]

    def enter(self) -> None:
        for path in self.paths:
            (path / "cgroup.procs").write_text("0")

    def start(self, argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen(argv, preexec_fn=self.enter)

    def run_helper(self, scenario: str) -> dict:
        done = subprocess.run([sys.executable, __file__, scenario], preexec_fn=self.enter, capture_output=True,
                              text=True, timeout=HELPER_TIMEOUT_S, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def cgroup(self) -> str:
        """This cgroup as ``/proc/<pid>/cgroup`` shows it (v2)."""
        v2 = cgroups._hierarchies()[1]
        return "/" + os.path.relpath(self.paths[0], v2.mount_point)


def _destroy(top: Path) -> None:
    """Kill what is left in ``top`` and below it, and remove them all, deepest first."""
    if not top.exists():
        return
    for directory, _, _ in os.walk(top, topdown=False):
        group = Path(directory)
        cgroups._kill_members(lambda: cgroups._procs(group), time.monotonic() + CLEAN_UP_WITHIN_S)
        cgroups._rmdir(group, CLEAN_UP_WITHIN_S)


def _write(path: Path, text: str) -> None:
    path.write_text(text)


@pytest.fixture
def v1_parent() -> Iterator[Callable[..., ParentCgroup]]:
    """Makes a parent cgroup below this process's own in the v1 memory and pids hierarchies, with the limits given
    (none by default)."""
    if os.geteuid() != 0:
        pytest.skip("cgroups for tests need root")
    v1, _ = cgroups._hierarchies()
    if "memory" not in v1 or "pids" not in v1:
        pytest.skip("no cgroup v1 memory and pids hierarchies (a pure cgroup v2 system)")
    own = [v1[name].directory(cgroups._own_cgroup(os.getpid(), name)) for name in ("memory", "pids")]
    if not all(path is not None and os.access(path, os.W_OK) for path in own):
        pytest.skip(f"this process's own cgroups are not writable: {own}")
    made: list[Path] = []

    def make(memory_bytes: int | None = None, tasks: int | None = None, below: ParentCgroup | None = None,
             ) -> ParentCgroup:
        name = f"automaton-test-{os.getpid()}-{next(_serial)}"
        paths = tuple(path / name for path in (below.paths if below else own))
        for path in paths:
            path.mkdir()
            made.append(path)
        if memory_bytes is not None:
            _write(paths[0] / "memory.limit_in_bytes", str(memory_bytes))
        if tasks is not None:
            _write(paths[1] / "pids.max", str(tasks))
        return ParentCgroup(paths)

    try:
        yield make
    finally:
        for path in reversed(made):
            _destroy(path)


@pytest.fixture
def v2_parent() -> Iterator[ParentCgroup]:
    """A cgroup below this process's own in the v2 hierarchy, with ``cgroup.kill``."""
    if os.geteuid() != 0:
        pytest.skip("cgroups for tests need root")
    _, v2 = cgroups._hierarchies()
    if v2 is None:
        pytest.skip("no cgroup v2 hierarchy is mounted")
    own = v2.directory(cgroups._own_cgroup(os.getpid(), ""))
    if own is None or not os.access(own, os.W_OK):
        pytest.skip(f"this process's own v2 cgroup is not writable: {own}")
    path = own / f"automaton-test-{os.getpid()}-{next(_serial)}"
    path.mkdir()
    try:
        if not (path / "cgroup.kill").exists():
            pytest.skip("no cgroup.kill (a kernel before 5.14)")
        yield ParentCgroup((path,))
    finally:
        _destroy(path)


def test_the_commands_share_is_all_but_the_daemons_or_half() -> None:
    assert commands_share(320 * MiB, DAEMON_MEMORY_BYTES) == 224 * MiB
    assert commands_share(2 * DAEMON_MEMORY_BYTES, DAEMON_MEMORY_BYTES) == DAEMON_MEMORY_BYTES
    assert commands_share(150 * MiB, DAEMON_MEMORY_BYTES) == 75 * MiB
    assert commands_share(100, DAEMON_TASKS) == 50
    assert commands_share(None, DAEMON_TASKS) is None


def test_a_process_that_is_gone_gets_no_group() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    group = commands_group(own_pid=gone.pid)
    assert isinstance(group, cgroups.Unavailable) and str(gone.pid) in group.reason
    assert group.describe().startswith("no cgroup for commands: ")


def test_limits_are_the_parents_less_the_daemons_share(v1_parent: Callable[..., ParentCgroup]) -> None:
    parent = v1_parent(320 * MiB, 512)
    report = parent.run_helper("limits")
    assert report["version"] == 1
    assert (report["memory_max"], report["tasks_max"]) == (224 * MiB, 448)
    assert report["describe"] == "cgroup v1: memory 224 MiB, tasks 448 for commands"
    assert report["paths"] == [str(path / f"automaton-commands-{report['helper']}") for path in parent.paths]
    assert report["files"]["memory.limit_in_bytes"] == str(224 * MiB)
    assert report["files"]["memory.memsw.limit_in_bytes"] in (str(224 * MiB), None)
    assert report["files"]["pids.max"] == "448"
    assert report["members"] == [report["child"]]
    assert report["child_returncode"] == -9
    assert report["left"] == []


def test_a_dead_agents_group_is_removed_with_its_commands(v1_parent: Callable[..., ParentCgroup]) -> None:
    """A daemon killed without its clean-up leaves its commands' group (and maybe commands) behind: the next agent
    started in the same cgroup removes them; a group whose daemon still runs is left alone."""
    parent = v1_parent()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = [path / f"automaton-commands-{dead.pid}" for path in parent.paths]
    running = [path / f"automaton-commands-{os.getpid()}" for path in parent.paths]
    for path in stale + running:
        path.mkdir()
    leftover = subprocess.Popen(["sleep", "300"], preexec_fn=lambda: [
        (path / "cgroup.procs").write_text("0") for path in stale])
    parent.run_helper("limits")
    assert leftover.wait(timeout=10) == -9
    assert [path.exists() for path in stale] == [False, False]
    assert [path.exists() for path in running] == [True, True]


def test_the_limit_is_the_lowest_above(v1_parent: Callable[..., ParentCgroup]) -> None:
    inner = v1_parent(1024 * MiB, 1000, below=v1_parent(320 * MiB, 512))
    report = inner.run_helper("limits")
    assert (report["memory_max"], report["tasks_max"]) == (224 * MiB, 448)
    assert report["left"] == []


def test_no_limit_above_means_none_for_the_commands(v1_parent: Callable[..., ParentCgroup]) -> None:
    parent = v1_parent()
    v1, _ = cgroups._hierarchies()
    for path, limit_file, hierarchy in zip(parent.paths, ("memory.limit_in_bytes", "pids.max"), (v1["memory"],
                                                                                                   v1["pids"])):
        if cgroups._effective_limit(path, hierarchy.mount_point, limit_file) is not None:
            pytest.skip(f"a cgroup above this process has a {limit_file}")
    report = parent.run_helper("limits")
    assert (report["memory_max"], report["tasks_max"]) == (None, None)
    assert report["describe"] == "cgroup v1: memory no limit, tasks no limit for commands"
    assert report["files"]["pids.max"] == "max"
    assert report["left"] == []


def test_kill_all_kills_a_tree_with_a_setsid_child(v1_parent: Callable[..., ParentCgroup]) -> None:
    report = v1_parent(320 * MiB, 512).run_helper("kill_tree")
    tree, plain, detached = report["tree"], report["plain"], report["detached"]
    tree_session, _, detached_session = report["sessions"]
    assert detached_session != tree_session
    assert report["members_before"] == sorted([tree, plain, detached])
    assert report["members_after"] == [] and report["running_after"] == []
    assert report["tree_returncode"] == -9
    assert report["kill_s"] < 1.0
    assert report["left"] == []


def test_the_task_limit_holds_and_kill_all_ends_every_task(v1_parent: Callable[..., ParentCgroup]) -> None:
    report = v1_parent(320 * MiB, 2 * DAEMON_TASKS).run_helper("fork_storm")
    assert report["tasks_max"] == DAEMON_TASKS
    assert report["children"] == DAEMON_TASKS - 1 and len(report["members_before"]) == DAEMON_TASKS
    assert report["members_after"] == []
    assert report["kill_s"] < 1.0
    assert report["left"] == []


def test_a_member_that_exited_does_not_hold_up_removal(v1_parent: Callable[..., ParentCgroup]) -> None:
    report = v1_parent(320 * MiB, 512).run_helper("exited_member")
    assert report["state"] == "Z"  # exited, not yet reaped by the helper
    assert report["members"] == []
    assert report["remove_s"] < 1.0
    assert report["left"] == []


def test_the_memory_limit_holds_and_the_daemon_survives(v1_parent: Callable[..., ParentCgroup]) -> None:
    report = v1_parent(200 * MiB, 512).run_helper("oom")
    assert report["memory_max"] == 104 * MiB
    assert report["hog_returncode"] == -9
    assert report["oom_control"]["oom_kill"] >= 1
    assert report["max_usage"] <= 104 * MiB
    assert report["left"] == []


def test_v2_moves_into_a_daemon_leaf_kills_with_cgroup_kill_and_undoes(v2_parent: ParentCgroup) -> None:
    report = v2_parent.run_helper("v2_lifecycle")
    parent = v2_parent.paths[0]
    assert report["version"] == 2 and report["paths"] == [str(parent / "commands")]
    assert report["cgroup_during"] == f"{v2_parent.cgroup()}/daemon"
    assert report["daemon_members"] == [report["helper"]]
    assert report["members_before"] == sorted([report["tree"], report["plain"], report["detached"]])
    assert report["members_after"] == [] and report["running_after"] == []
    assert report["kill_s"] < 1.0
    assert report["cgroup_after"] == v2_parent.cgroup()
    assert [path for path in parent.iterdir() if path.is_dir()] == []


def test_v2_leaves_a_cgroup_shared_with_another_process_alone(v2_parent: ParentCgroup) -> None:
    other = v2_parent.start(["sleep", "300"])
    try:
        report = v2_parent.run_helper("v2_group")
    finally:
        other.kill()
        other.wait()
    assert "not a leaf of this process alone (1 other processes in it)" in report["reason"]
    assert report["cgroup_after"] == v2_parent.cgroup()
    assert not (v2_parent.paths[0] / "daemon").exists()


def test_v2_undoes_every_step_when_one_fails(v2_parent: ParentCgroup) -> None:
    (v2_parent.paths[0] / "commands").mkdir()
    report = v2_parent.run_helper("v2_group")
    assert f"[Errno {errno.EEXIST}]" in report["reason"] and "commands" in report["reason"]
    assert report["cgroup_after"] == v2_parent.cgroup()
    assert not (v2_parent.paths[0] / "daemon").exists()


# The helpers, run inside a test's parent cgroup.

def _start_in(group: CommandGroup, argv: list[str], **options) -> subprocess.Popen:
    return subprocess.Popen(argv, preexec_fn=lambda: group.add(os.getpid()), **options)


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        return handle.read().rsplit(")", 1)[1].split()


def _running(pid: int) -> bool:
    try:
        return _stat(pid)[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def _v2_cgroup() -> str:
    return cgroups._own_cgroup(os.getpid(), "")


def _made(group: CommandGroup | cgroups.Unavailable) -> CommandGroup:
    assert isinstance(group, CommandGroup), group
    return group


def _kill_tree(group: CommandGroup) -> dict:
    """Starts ``TREE`` in the group, kills it all, and what became of it."""
    reaper.become_subreaper()  # the tree's orphans come to this helper, not to PID 1
    tree = _start_in(group, [sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    plain, detached = (int(pid) for pid in tree.stdout.readline().split())
    report = {"tree": tree.pid, "plain": plain, "detached": detached, "members_before": group.members(),
              "sessions": [int(_stat(pid)[3]) for pid in (tree.pid, plain, detached)]}
    started = time.monotonic()
    group.kill_all()
    report["kill_s"] = time.monotonic() - started
    report["members_after"] = group.members()
    report["tree_returncode"] = tree.wait()
    report["running_after"] = [pid for pid in (plain, detached) if _running(pid)]
    return report


def _helper_limits() -> dict:
    group = _made(commands_group())
    memory, pids = group.paths
    memsw = memory / "memory.memsw.limit_in_bytes"
    report = {"helper": os.getpid(), "version": group.version, "memory_max": group.memory_max,
              "tasks_max": group.tasks_max, "describe": group.describe(), "paths": [str(path) for path in group.paths],
              "files": {"memory.limit_in_bytes": (memory / "memory.limit_in_bytes").read_text().strip(),
                        "memory.memsw.limit_in_bytes": memsw.read_text().strip() if memsw.exists() else None,
                        "pids.max": (pids / "pids.max").read_text().strip()}}
    child = _start_in(group, ["sleep", "300"])
    report |= {"child": child.pid, "members": group.members()}
    group.remove()
    report |= {"child_returncode": child.wait(), "left": [str(path) for path in group.paths if path.exists()]}
    return report


def _helper_kill_tree() -> dict:
    group = _made(commands_group())
    report = _kill_tree(group)
    group.remove()
    return report | {"left": [str(path) for path in group.paths if path.exists()]}


def _helper_fork_storm() -> dict:
    reaper.become_subreaper()  # the storm's orphans come to this helper, not to PID 1
    group = _made(commands_group())
    storm = _start_in(group, [sys.executable, "-c", STORM], stdout=subprocess.PIPE, text=True)
    report = {"tasks_max": group.tasks_max, "children": int(storm.stdout.readline()), "members_before": group.members()}
    started = time.monotonic()
    group.kill_all()
    report |= {"kill_s": time.monotonic() - started, "members_after": group.members()}
    storm.wait()
    reaper.reap()
    group.remove()
    return report | {"left": [str(path) for path in group.paths if path.exists()]}


def _helper_exited_member() -> dict:
    group = _made(commands_group())
    child = _start_in(group, ["true"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    report = {"state": _stat(child.pid)[0], "members": group.members()}
    started = time.monotonic()
    group.remove()
    report["remove_s"] = time.monotonic() - started
    child.wait()
    return report | {"left": [str(path) for path in group.paths if path.exists()]}


def _helper_oom() -> dict:
    group = _made(commands_group())
    memory = group.paths[0]
    hog = _start_in(group, [sys.executable, "-c", f"data = b'x' * {150 * MiB}"])
    report = {"memory_max": group.memory_max, "hog_returncode": hog.wait(),
              "oom_control": {name: int(value) for name, value in
                              (line.split() for line in (memory / "memory.oom_control").read_text().splitlines())},
              "max_usage": int((memory / "memory.max_usage_in_bytes").read_text())}
    group.remove()
    return report | {"left": [str(path) for path in group.paths if path.exists()]}


def _helper_v2_lifecycle() -> dict:
    # no controllers: in hybrid mode memory and pids are on v1, and the v2 hierarchy has none to give
    group = _made(cgroups._v2_group(cgroups._hierarchies()[1], os.getpid(), controllers=()))
    daemon = group.paths[0].parent / "daemon"
    report = {"helper": os.getpid(), "version": group.version, "paths": [str(path) for path in group.paths],
              "cgroup_during": _v2_cgroup(), "daemon_members": cgroups._procs(daemon)}
    report |= _kill_tree(group)
    group.remove()
    return report | {"cgroup_after": _v2_cgroup()}


def _helper_v2_group() -> dict:
    try:
        group = cgroups._v2_group(cgroups._hierarchies()[1], os.getpid(), controllers=())
    except OSError as exc:  # what commands_group makes of it; every step before the failing one is undone by then
        group = cgroups.Unavailable(str(exc))
    assert isinstance(group, cgroups.Unavailable), group
    return {"reason": group.reason, "cgroup_after": _v2_cgroup()}


HELPERS = {name.removeprefix("_helper_"): helper for name, helper in globals().items() if name.startswith("_helper_")}

if __name__ == "__main__":
    print(json.dumps(HELPERS[sys.argv[1]]()))

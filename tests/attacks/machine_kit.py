"""What the attacks through the machine share: the real ``automaton-min run`` in a cgroup of the unit's size, a small
filesystem for the home, and a look at which processes are still alive.

cgroups: version 2 (a child of the cgroup this test runs in, when its controllers can be delegated there) or
version 1 (the ``memory`` and ``pids`` hierarchies, as on this project's CI machines). Both need root, as does
mounting a tmpfs; without root these tests skip (CI runs as root, so there they always run).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from automaton_min.confine import reaper
from automaton_min.home import Home
from automaton_min.store.db import open_database
from conftest import CREATOR, RunningAgent, keep_offline

CGROUP_ROOT = Path("/sys/fs/cgroup")
# The system's PATH for the agent under attack: its commands then run the system's python3, which the confinement
# lets them read wherever the agent runs from (a pyenv or virtualenv python needs its prefix, which is granted only
# when the daemon itself runs from it, not when it is the one-file binary).
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (cgroups, tmpfs): CI runs as root")


def _own_cgroup(controller: str | None) -> Path:
    """Where this process sits in the v1 hierarchy of ``controller`` (or in the v2 one, for None)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (controller is None and controllers == "") or (controller and controller in controllers.split(",")):
            return Path(path.lstrip("/"))
    raise LookupError(controller)


class Cgroup:
    """A fresh cgroup with limits (``memory_bytes``, ``tasks``); ``join`` is a ``preexec_fn`` that puts a child in it.
    ``close`` kills whatever is left inside and removes it."""

    def __init__(self, *, memory_bytes: int | None = None, tasks: int | None = None) -> None:
        need_root()
        name = f"automaton-attack-{uuid.uuid4().hex[:8]}"
        self.dirs: list[Path] = []
        v2_controllers = CGROUP_ROOT / "cgroup.controllers"
        if v2_controllers.exists():  # the unified hierarchy alone
            self._make_v2(name, memory_bytes, tasks)
        else:
            if memory_bytes is not None:
                self._make_v1("memory", name, {"memory.limit_in_bytes": memory_bytes, "memory.memsw.limit_in_bytes": None})
            if tasks is not None:
                self._make_v1("pids", name, {"pids.max": tasks})

    def _make_v1(self, controller: str, name: str, limits: dict[str, int | None]) -> None:
        base = CGROUP_ROOT / controller
        if not base.is_dir():
            pytest.skip(f"no cgroup v1 {controller} hierarchy here")
        path = base / _own_cgroup(controller) / name
        path.mkdir()
        self.dirs.append(path)
        for knob, value in limits.items():
            if value is not None:
                (path / knob).write_text(str(value))

    def _make_v2(self, name: str, memory_bytes: int | None, tasks: int | None) -> None:
        parent = CGROUP_ROOT / _own_cgroup(None)
        wanted = [c for c, v in (("memory", memory_bytes), ("pids", tasks)) if v is not None]
        available = (parent / "cgroup.subtree_control").read_text().split()
        if not set(wanted) <= set(available):
            pytest.skip(f"cgroup v2 controllers {wanted} are not delegated to {parent}")
        path = parent / name
        path.mkdir()
        self.dirs.append(path)
        if memory_bytes is not None:
            (path / "memory.max").write_text(str(memory_bytes))
            (path / "memory.swap.max").write_text("0")
        if tasks is not None:
            (path / "pids.max").write_text(str(tasks))

    def join(self) -> None:
        """In the child, before exec: move this process into the cgroup (every hierarchy)."""
        for path in self.dirs:
            with open(path / "cgroup.procs", "w") as handle:
                handle.write("0")

    def members(self) -> list[int]:
        found: set[int] = set()
        for path in self.dirs:
            found |= {int(pid) for pid in (path / "cgroup.procs").read_text().split()}
        return sorted(found)

    def close(self) -> None:
        for _ in range(100):
            members = self.members()
            if not members:
                break
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            threading.Event().wait(0.05)  # the kernel empties the group asynchronously
        for path in self.dirs:
            try:
                path.rmdir()
            except OSError:
                pass


class SmallDisk:
    """A tmpfs of ``size_mb`` (and at most ``inodes`` files) at ``where`` (unmounted by ``close``)."""

    def __init__(self, where: Path, size_mb: int, inodes: int | None = None) -> None:
        need_root()
        where.mkdir(parents=True, exist_ok=True)
        options = f"size={size_mb}m,mode=0700" + (f",nr_inodes={inodes}" if inodes else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        self.where = where

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.where)], check=False)


@contextmanager
def agent_run(home_root: Path, env: dict[str, str] | None = None, cgroup: Cgroup | None = None) -> Iterator[RunningAgent]:
    """The real ``automaton-min run`` on ``home_root`` (in ``cgroup``); on the way out it is stopped and the cgroup
    removed."""
    run = RunningAgent({**os.environ, "AUTOMATON_HOME": str(home_root), "PATH": SYSTEM_PATH, **(env or {})},
                       preexec_fn=cgroup.join if cgroup else None)
    try:
        yield run
    finally:
        try:
            run.stop()
        finally:
            if cgroup is not None:
                cgroup.close()


def asleep_then_stopped(run: RunningAgent) -> None:
    """The run survived to its sleep, and SIGTERM ends it with exit 0."""
    run.wait_for('"msg":"asleep"', timeout_s=120)
    assert run.proc.poll() is None, run.output
    assert run.stop() == 0, run.output


def survivors(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running; all of them are killed on the way out."""
    left = alive(pids)
    kill_all(pids)
    return left


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run (zombies waiting for init to reap them do not count)."""
    return [pid for pid in pids if reaper.alive(pid)]


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        if pid <= 1:  # never -1 (every process) nor init
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def set_up_home(cli, home: Home, model) -> None:
    """``home`` set up through the real CLI against the scripted ``model``, kept offline."""
    setup = cli("setup", "--name", "ada", "--genesis-prompt", "Try.", "--creator-address", CREATOR,
                "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes",
                env={"AUTOMATON_HOME": str(home.root)})
    assert setup.code == 0, setup.stderr
    keep_offline(home)


def exec_results(home: Home) -> list[tuple[str, str | None, str | None]]:
    """Every exec call as stored: (command, result, error), oldest first."""
    with open_database(home.default_db_path) as db:
        return [(json.loads(r[0])["command"], r[1], r[2])
                for r in db.query("SELECT arguments, result, error FROM tool_calls WHERE name = 'exec' ORDER BY rowid")]

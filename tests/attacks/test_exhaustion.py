"""Attacks that exhaust the machine: memory, tasks and disk, each at the size the systemd unit gives the service
(``MemoryMax=320M``, ``TasksMax=512``) or a small disk (a 64 MB tmpfs holding the home). The real
``automaton-min run`` runs in the cgroup; the scripted model orders the attack, then asks for more turns. The agent
must survive each one, keep taking turns, and stop with exit 0.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from attack_kit import finish, turn
from attack_kit import model  # noqa: F401 (fixtures)
from machine_kit import Cgroup, SmallDisk, agent_run, asleep_then_stopped, exec_results, set_up_home
from automaton_min.confine.landlock import abi_version
from automaton_min.home import Home
from automaton_min.store.disk_reserve import RESERVE_BYTES, RESERVE_NAME

pytestmark = pytest.mark.skipif(abi_version() < 1, reason="this kernel has no Landlock")

MB = 1 << 20
HOG = "python3 -c \"import time; held = b'x' * (20 << 20); time.sleep(60)\""
# Fork until the kernel says no; every child, in a session of its own, takes back any task that comes free.
FILL_TASKS = r"""
import os, time
def hold():
    os.setsid()
    while True:
        time.sleep(0.2)
        try:
            if os.fork() == 0:
                hold()
        except OSError:
            pass
made = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        hold()
    made += 1
print('forked', made)
"""


def test_commands_filling_the_memory_cgroup_never_take_the_daemon(cli, home, model) -> None:
    set_up_home(cli, home, model)
    hogs = " ".join([f"{HOG} &"] * 40) + " wait; echo hogs-done"
    model.script(turn(("exec", {"command": hogs, "timeout": 20_000})), turn(("exec", {"command": "echo survived"})),
                 finish())
    with agent_run(home.root, cgroup=Cgroup(memory_bytes=320 * MB)) as run:
        asleep_then_stopped(run)
    assert model.pending == 0, run.output
    assert any(r and "survived" in r for _, r, _ in exec_results(home)), exec_results(home)


def test_a_command_taking_every_task_does_not_break_later_turns(cli, home, model) -> None:
    set_up_home(cli, home, model)
    model.script(turn(("write_file", {"path": "fill.py", "content": FILL_TASKS})),
                 turn(("exec", {"command": "python3 fill.py < /dev/null 2>&1"})),
                 turn(("exec", {"command": "echo next-turn"})), finish())
    with agent_run(home.root, cgroup=Cgroup(tasks=512)) as run:
        asleep_then_stopped(run)
    assert model.pending == 0, run.output
    results = exec_results(home)
    assert any(r and "forked" in r for _, r, _ in results), results  # the attack ran
    assert any(r and "next-turn" in r for _, r, _ in results), results
    assert "can't start new thread" not in run.output


FILL_DISK = "mkdir -p cache && python3 -c \"open('cache/blob', 'wb').write(b'z' * (200 << 20))\" 2>/dev/null; echo filled"


@pytest.fixture
def small_home(tmp_path):
    """Makes a home on a 64 MB tmpfs (with at most ``inodes`` files); unmounted afterwards."""
    disks: list[SmallDisk] = []

    def make(inodes: int | None = None) -> Home:
        disks.append(SmallDisk(tmp_path / "small", 64, inodes=inodes))
        return Home(disks[-1].where / "automaton-home")

    yield make
    for disk in disks:
        disk.close()


def test_a_command_filling_the_disk_fails_alone_and_the_agent_is_told(cli, model, small_home) -> None:
    home = small_home()
    set_up_home(cli, home, model)
    model.script(turn(("exec", {"command": FILL_DISK})),
                 turn(("exec", {"command": "rm -rf cache; echo cleaned"})), finish())
    with agent_run(home.root) as run:
        asleep_then_stopped(run)
    assert model.pending == 0, run.output
    results = exec_results(home)
    assert any(r and "filled" in r for _, r, _ in results), results
    assert any(r and "cleaned" in r for _, r, _ in results), results
    # the request after the command that filled the disk: the runtime's own words (the command's output is
    # only "filled"), not the command echoed back in the assistant's message
    told = "\n".join(str(m.get("content")) for m in model.requests[1].body["messages"] if m["role"] != "assistant")
    assert "disk" in told and "full" in told and "cache" in told, told[-2000:]
    assert "database or disk is full" not in run.output
    assert not (home.root / ".disk-reserve").exists()  # given back at the stop


FILL_INODES = "mkdir -p many && cd many && i=0; while true > f$i 2>/dev/null; do i=$((i+1)); done; echo made $i"


def test_a_command_using_up_the_inodes_fails_alone_and_the_agent_is_told(cli, model, small_home) -> None:
    home = small_home(inodes=600)
    set_up_home(cli, home, model)
    model.script(turn(("exec", {"command": FILL_INODES})),
                 turn(("exec", {"command": "rm -rf many; echo cleaned"})), finish())
    with agent_run(home.root) as run:
        asleep_then_stopped(run)
    results = exec_results(home)
    assert any(r and "made" in r for _, r, _ in results), results
    assert any(r and "cleaned" in r for _, r, _ in results), results
    told = "\n".join(str(m.get("content")) for m in model.requests[1].body["messages"] if m["role"] != "assistant")
    assert "inodes" in told and "many" in told, told[-2000:]
    model.script(finish())
    with agent_run(home.root) as again:  # the next start finds room
        asleep_then_stopped(again)


def test_a_home_left_without_inodes_is_one_line_at_start(cli, model, small_home) -> None:
    home = small_home(inodes=600)
    set_up_home(cli, home, model)
    crowd = home.root / "workspace" / "crowd"
    crowd.mkdir(parents=True)
    for n in range(1000):
        try:
            (crowd / f"f{n}").touch()
        except OSError:
            break
    result = cli("run", env={"AUTOMATON_HOME": str(home.root)})
    assert result.code != 0 and "is full" in result.stderr and "inodes" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "chown" not in result.stderr


def _tree_written_bytes(pid: int) -> int:
    """``write_bytes`` (what was dirtied for block storage) of ``pid`` and every process under it."""
    total = int(next(line.split()[1] for line in Path(f"/proc/{pid}/io").read_text().splitlines()
                     if line.startswith("write_bytes:")))
    for task in Path(f"/proc/{pid}/task").iterdir():
        total += sum(_tree_written_bytes(int(child)) for child in (task / "children").read_text().split())
    return total


def test_the_disk_reserve_holds_its_blocks_without_writing_them(cli, home, model) -> None:
    """The running service's reserve is allocated (its blocks counted in st_blocks) but never written: an SD card
    is spared 4 MiB of zeros at every start."""
    if _on_tmpfs(home.root.parent):
        pytest.skip("the home is on tmpfs, whose writes the kernel does not count")
    set_up_home(cli, home, model)
    model.script(finish())
    with agent_run(home.root) as run:
        run.wait_for('"msg":"asleep"', timeout_s=120)
        reserve = (home.root / RESERVE_NAME).stat()
        written = _tree_written_bytes(run.proc.pid)
    assert reserve.st_size == RESERVE_BYTES
    assert reserve.st_blocks * 512 >= RESERVE_BYTES
    assert written < RESERVE_BYTES, f"{written} bytes written by a start that should write well under 4 MiB"


def _on_tmpfs(path: Path) -> bool:
    mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    best = max((m for m in mounts if str(path).startswith(m[1].rstrip("/") + "/") or str(path) == m[1]),
               key=lambda m: len(m[1]))
    return best[2] == "tmpfs"

"""Attacks through processes a command leaves behind, through a command that hangs the spawner, and through trees
a command makes for the clean-up to trip on. All through the real ``automaton-min run``, stopped with SIGTERM.

- A chain of setsid'd, double-forked processes (each a new session, each orphaned) must end with the call that
  started it, and nothing may outlive the agent.
- A setsid'd child that ptrace-seizes the command's shell, so that the shell's death is reported to the tracer,
  not to the spawner: the call must still end at its timeout, and every tool must work afterwards.
- A 1,500-level directory in the private temp dir (deeper than PATH_MAX): the stop must still end with the WAL
  checkpoint, the last-run record and exit 0, and the temp dir must be gone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from attack_kit import finish, turn
from attack_kit import model  # noqa: F401 (fixtures)
from machine_kit import agent_run, asleep_then_stopped, exec_results, set_up_home, survivors
from automaton_min.confine.landlock import abi_version
from automaton_min.runtime.status import LAST_RUN_KEY
from automaton_min.store.db import open_database
from automaton_min.store.kv import get_value
from automaton_min.trees import remove_tree

pytestmark = pytest.mark.skipif(abi_version() < 1, reason="this kernel has no Landlock")

# Nine generations, each its own session and an orphan (its parent exits); every one writes its pid, then waits.
CHAIN = r"""
import os, sys, time
def generation(n):
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    with open('pids.txt', 'a') as out:
        out.write(f'{os.getpid()}\n')
    if n > 1:
        generation(n - 1)
    time.sleep(600)
    os._exit(0)
generation(9)
while not os.path.exists('pids.txt') or len(open('pids.txt').read().split()) < 9:
    time.sleep(0.05)
print('started 9')
"""

CHECK = ("for p in $(cat pids.txt); do s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null); "
         "if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo ALIVE $p; fi; done; echo checked")

# A setsid'd child seizes the command's shell (its argument); the shell then sleeps past the call's timeout.
SEIZE = r"""
import ctypes, os, sys, time
if os.fork():
    os._exit(0)
os.setsid()
libc = ctypes.CDLL(None, use_errno=True)
result = libc.ptrace(0x4206, int(sys.argv[1]), None, None)  # PTRACE_SEIZE
with open('seize.txt', 'w') as out:
    out.write(f'{os.getpid()}\n')
with open('seize-result.txt', 'w') as out:
    out.write(f'{result} {ctypes.get_errno()}\n')
time.sleep(25)
"""

DEEP = "python3 -c \"import os\nos.chdir(os.environ['TMPDIR'])\nfor _ in range(1500):\n    os.mkdir('a'); os.chdir('a')\nprint('deep')\""


def pids_in(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


@pytest.fixture
def temp(tmp_path) -> Iterator[Path]:
    """The run's TMPDIR, removed afterwards however deep the tree a command left in it."""
    path = tmp_path / "tmp"
    path.mkdir()
    yield path
    remove_tree(path)


@pytest.fixture
def pid_files(home) -> Iterator[list[str]]:
    """Workspace files where commands write pids: whatever they name is killed after the test, pass or fail."""
    names: list[str] = []
    yield names
    for name in names:
        survivors(pids_in(home.root / "workspace" / name))


def test_a_commands_processes_end_with_its_call_and_none_outlives_the_agent(cli, home, model, pid_files) -> None:
    set_up_home(cli, home, model)
    pid_files.append("pids.txt")
    model.script(turn(("write_file", {"path": "chain.py", "content": CHAIN})),
                 turn(("exec", {"command": "python3 chain.py > /dev/null 2>&1 < /dev/null; echo started"})),
                 turn(("exec", {"command": CHECK})), finish())
    with agent_run(home.root) as run:
        asleep_then_stopped(run)
    pids = pids_in(home.root / "workspace" / "pids.txt")
    assert len(pids) == 9, run.output
    assert survivors(pids) == [], "some of the chain outlived the agent"
    check = exec_results(home)[-1][1]
    assert "checked" in check and "ALIVE" not in check, check  # already gone when the call ended


def test_a_command_cannot_hang_the_spawner_nor_break_the_tools(cli, home, model, temp, pid_files) -> None:
    set_up_home(cli, home, model)
    pid_files.append("seize.txt")
    model.script(turn(("exec", {"command": DEEP})),
                 turn(("write_file", {"path": "seize.py", "content": SEIZE})),
                 turn(("exec", {"command": "python3 seize.py $$; sleep 60", "timeout": 1000})),
                 turn(("exec", {"command": "echo still-working"}), ("write_file", {"path": "after.txt", "content": "fine"}),
                      ("read_file", {"path": "after.txt"})),
                 finish())
    with agent_run(home.root, {"TMPDIR": str(temp)}) as run:
        asleep_then_stopped(run)
    results = exec_results(home)
    hung = next(r for c, r, e in results if "seize.py" in c)
    assert hung and "timed_out: true" in hung, results
    assert any(r and "still-working" in r for c, r, e in results if "still-working" in c), results
    with open_database(home.default_db_path) as db:
        files = [(r[0], r[1], r[2]) for r in db.query("SELECT name, result, error FROM tool_calls"
                                                     " WHERE name IN ('write_file', 'read_file') ORDER BY rowid")]
    assert files[-1] == ("read_file", "fine", None), files
    assert files[-2][2] is None, files
    assert survivors(pids_in(home.root / "workspace" / "seize.txt")) == [], "the tracer outlived the agent"
    assert list(temp.iterdir()) == [], "the private temp dir was left behind"


def test_a_deep_tree_in_the_temp_dir_does_not_break_the_stop(cli, home, model, temp) -> None:
    set_up_home(cli, home, model)
    model.script(turn(("exec", {"command": DEEP})), finish())
    with agent_run(home.root, {"TMPDIR": str(temp)}) as run:
        asleep_then_stopped(run)
    assert "fatal" not in run.output, run.output
    assert list(temp.iterdir()) == [], "the private temp dir was left behind"
    with open_database(home.default_db_path) as db:
        assert json.loads(get_value(db, LAST_RUN_KEY))["stoppedAt"]
    wal = Path(str(home.default_db_path) + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # checkpointed


def test_a_background_job_is_listed_stoppable_and_ends_with_the_agent(cli, home, model, pid_files) -> None:
    """The one way to keep a process past its call: ``exec`` with ``background``; ``status`` lists it,
    ``stop_job`` ends it, and the rest end when the agent stops."""
    set_up_home(cli, home, model)
    pid_files += ["keeper.pid", "stopped.pid"]
    seen: dict = {}

    def look_at_status(body):
        seen.update(json.loads(cli("status", "--json").stdout))
        return turn(("stop_job", {"id": "job2"}), ("exec", {"command": "echo next"}))

    model.script(turn(("exec", {"command": "echo $$ > keeper.pid; exec sleep 300", "background": True}),
                      ("exec", {"command": "echo $$ > stopped.pid; exec sleep 301", "background": True}),
                      ("exec", {"command": "exit 0", "background": True})),  # ended at once: not listed
                 look_at_status, finish())
    with agent_run(home.root) as run:
        asleep_then_stopped(run)
    pids = [pid for name in pid_files for pid in pids_in(home.root / "workspace" / name)]
    assert [job["id"] for job in seen["backgroundJobs"]] == ["job1", "job2"], seen.get("backgroundJobs")
    assert len(pids) == 2 and survivors(pids) == [], "a background job outlived the agent"
    with open_database(home.default_db_path) as db:
        stopped = db.query_one("SELECT result, error FROM tool_calls WHERE name = 'stop_job'")
    assert stopped[1] is None and "stopped job2" in stopped[0] and "running now: job1" in stopped[0], stopped

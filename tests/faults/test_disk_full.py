"""Disk full while writing: the real ``automaton-min run`` under RLIMIT_FSIZE, so every write past the limit fails
with EFBIG (SIGXFSZ ignored) exactly as a write to a full disk fails with ENOSPC: SQLite sees a failed write.

How: once the agent is up (its first turn committed), every process of the run gets a soft file-size limit a
little above ``state.db`` (``prlimit`` on the running processes; the hard limit stays unlimited). Set after the
start, so the run starts as usual (and the one-file binary, ``conftest.program()``, is already unpacked); Python
ignores SIGXFSZ, so a write past the limit fails with EFBIG. The scripted model
answers with ~150 KB of text a turn, so the WAL crosses the limit within a few turns. Then the limit is lifted
(``prlimit`` again, up to the hard limit, so no root is needed) -- space returns without a restart -- and
``automaton-min wake`` nudges it.

Asserted: the daemon keeps running while writes fail (it does not exit); the log has one error naming
``state.db``, the cause and the fix (free space), and no fatal error; ``PRAGMA integrity_check`` is ok while the
disk is full and after; once space returns, turns commit again and no inbox row is left ``in_progress``; SIGTERM
then exits 0. The library-level test (a real SQLite file, the limit set in a child process) shows a write refused
mid-transaction surfaces as the storage error itself, and the same connection writes again once space is back.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import CREATOR, keep_offline, program
from faults.support import integrity
from standins.model_servers import OpenAIServer, openai_answer

TEXT = 150_000


def busy(counter=iter(range(10**6))):
    def answer(body):
        n = next(counter)
        return openai_answer("T" * TEXT + f" turn {n}", [("call_0", "remember_fact",
                                                         json.dumps({"category": "disk", "key": f"k{n % 3}", "value": str(n)}))])
    return answer


def count(db_path, sql: str) -> int:
    import sqlite3

    con = sqlite3.connect(db_path, timeout=30)
    try:
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


def turns(db_path) -> int:
    """Committed turns; 0 before the run has created its tables."""
    import sqlite3

    try:
        return count(db_path, "SELECT COUNT(*) FROM turns") if db_path.exists() else 0
    except sqlite3.OperationalError:
        return 0


def run_processes(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux ``/proc/<pid>/task/<tid>/children``)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            todo += [int(child) for child in (task / "children").read_text().split()]
    return found


def wait_for(predicate, timeout_s: float, proc) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return predicate()


@pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs Linux prlimit")
def test_the_daemon_survives_a_full_disk_and_recovers_when_space_returns(cli, home, tmp_path) -> None:
    with OpenAIServer(mode="llamacpp") as model:
        model.script(*[busy()] * 400)
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Keep notes.", "--creator-address", CREATOR,
                    "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
        assert setup.code == 0, setup.stderr
        keep_offline(home)
        db_path = home.root / "state.db"
        out = open(tmp_path / "run.out", "w+")
        proc = subprocess.Popen([*program(), "run"], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            def log() -> str:
                out.flush()
                return (tmp_path / "run.out").read_text()

            assert wait_for(lambda: turns(db_path) >= 1, 30, proc), log()
            limit = db_path.stat().st_size + 3 * TEXT
            for pid in run_processes(proc.pid):  # the binary: its bootloader and the Python runtime it started
                resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
            # first the disk reserve is given up (a warning), then, still refused, the error with the fix
            assert wait_for(lambda: "free some space" in log(), 30, proc), log()[-3000:]
            time.sleep(0.5)  # the daemon is now waiting for space; it must still be there
            assert proc.poll() is None, log()[-3000:]
            assert integrity(db_path) == "ok"
            assert "released the disk reserve" in log()
            line = next(json.loads(l) for l in log().splitlines() if "free some space" in l)
            assert line["level"] == "error" and str(db_path) in line["msg"] and "free some space" in line["msg"]
            committed = count(db_path, "SELECT COUNT(*) FROM turns")

            for pid in run_processes(proc.pid):
                resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            woke = cli("wake", "space is back")
            assert woke.code == 0, woke.stderr
            assert wait_for(lambda: count(db_path, "SELECT COUNT(*) FROM turns") >= committed + 2, 30, proc), log()[-3000:]
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, log()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            out.close()

    text = (tmp_path / "run.out").read_text()
    assert "fatal error" not in text and "turn crashed" not in text  # one clear line, no traceback
    assert integrity(db_path) == "ok"
    assert count(db_path, "SELECT COUNT(*) FROM inbox_messages WHERE status = 'in_progress'") == 0


def test_a_disk_full_at_start_is_one_line_and_exit_1(cli, home) -> None:
    setup = cli("setup", "--name", "ada", "--genesis-prompt", "Keep notes.", "--creator-address", CREATOR,
                "--openai-base-url", "http://127.0.0.1:9", "--inference-model", "scripted-model", "--yes")
    assert setup.code == 0, setup.stderr
    keep_offline(home)
    # the database exists and is migrated (and the binary unpacked, once per version): what is left at start are
    # writes
    assert cli("status").code == 0

    def full() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))  # no file may grow at all

    result = subprocess.run([*program(), "run"], preexec_fn=full, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=60)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1 and len(lines) == 1 and "Traceback" not in result.stderr + result.stdout, result.stderr
    assert f"cannot write {home.root / 'state.db'}" in lines[0] and "free some space" in lines[0]
    assert integrity(home.root / "state.db") == "ok"


CHILD = textwrap.dedent("""
    import resource, signal, sys
    from pathlib import Path
    import apsw
    from automaton_min.store.db import open_database
    path = Path(sys.argv[1])
    db = open_database(path)
    db.execute("CREATE TABLE IF NOT EXISTS blob (b BLOB)")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size + 100_000, resource.RLIM_INFINITY))
    try:
        with db.transaction():  # 8 MB: more than the 4 MiB page cache, so a statement spills and fails mid-way
            for _ in range(8):
                db.execute("INSERT INTO blob VALUES (randomblob(1000000))")
    except apsw.Error as exc:
        print("refused:", type(exc).__name__, exc)
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    with db.transaction():  # space is back: the same connection takes a new transaction
        db.execute("INSERT INTO blob VALUES (zeroblob(1000))")
    print("rows:", db.scalar("SELECT COUNT(*) FROM blob"), "integrity:", db.integrity_check()[0])
    db.close()
""")


def test_a_write_the_disk_refuses_surfaces_as_a_storage_error_and_the_next_transaction_works(tmp_path) -> None:
    """SQLite rolls a transaction back by itself when a statement's write fails; the store must not then fail its
    own ROLLBACK ("cannot rollback - no transaction is active", an SQLError that hid the storage error from the
    daemon, which then exited)."""
    result = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "state.db")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert "refused: IOError" in result.stdout or "refused: FullError" in result.stdout, result.stdout
    assert "rows: 1 integrity: ok" in result.stdout

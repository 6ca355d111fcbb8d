"""Local mode: real processes in a workspace (timeouts end the whole group, output is capped, secrets stay out)."""

from __future__ import annotations

import os
import stat
import time
import tracemalloc
from pathlib import Path

import pytest

from automaton_min.conway.local import LocalSandbox
from automaton_min.conway.local import PortInfo
from automaton_min.conway.sandbox import Sandbox


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path / "work" / "space"


@pytest.fixture
def sandbox(workspace: Path) -> LocalSandbox:
    return LocalSandbox(workspace)


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a dead child nobody has reaped yet)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] not in ("Z", "X")


def test_it_is_a_sandbox(sandbox: LocalSandbox) -> None:
    assert isinstance(sandbox, Sandbox)


def test_exec_returns_output_and_exit_code(sandbox: LocalSandbox) -> None:
    result = sandbox.exec("echo out; echo err >&2; exit 3", 10)
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)
    assert not result.timed_out and not result.truncated
    assert sandbox.exec("true").exit_code == 0
    assert sandbox.exec("no-such-command-here").exit_code == 127


def test_stderr_is_kept_on_success_too(sandbox: LocalSandbox) -> None:
    assert sandbox.exec("echo note >&2").as_dict() == {
        "stdout": "", "stderr": "note\n", "exit_code": 0, "timed_out": False, "truncated": False,
    }


def test_a_command_killed_by_a_signal_reports_it(sandbox: LocalSandbox) -> None:
    assert sandbox.exec("kill -9 $$").exit_code == -9


def test_cwd_is_the_workspace_created_private(sandbox: LocalSandbox, workspace: Path) -> None:
    assert not workspace.exists()
    result = sandbox.exec("pwd; echo $HOME")
    assert result.stdout.split() == [str(workspace), str(workspace)]
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o700


def test_secrets_never_reach_the_command(sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "CONWAY_API_KEY": "cnwy_k_topsecret",
        "OPENAI_API_KEY": "sk-openai-secret",
        "ANTHROPIC_API_KEY": "sk-ant-secret",
        "AUTOMATON_RPC_URL": "https://rpc.example/secret-token",
        "SOME_UNRELATED_TOKEN": "another-secret",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LANG", "C.UTF-8")
    result = sandbox.exec("env", 10)
    assert result.exit_code == 0
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines() if "=" in line}
    assert names <= {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TERM", "PWD", "SHLVL", "_", "OLDPWD"}, names
    for name, value in secrets.items():
        assert name not in names and value not in result.stdout
    assert not any(name.startswith("AUTOMATON_") for name in names)
    assert "LANG=C.UTF-8" in result.stdout.splitlines()


def test_a_timeout_kills_children_and_grandchildren(sandbox: LocalSandbox, workspace: Path) -> None:
    command = "sh -c 'sleep 30 & echo $! > grandchild.pid; echo $$ > child.pid; sleep 30; wait' ; echo never"
    started = time.monotonic()
    result = sandbox.exec(command, 0.5)
    elapsed = time.monotonic() - started
    assert result.timed_out and elapsed < 3, elapsed
    assert "never" not in result.stdout and result.exit_code < 0
    pids = [int((workspace / name).read_text()) for name in ("grandchild.pid", "child.pid")]
    deadline = time.monotonic() + 2
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)  # reparented children are reaped by init, not by us
    assert not any(_alive(pid) for pid in pids)


def test_the_whole_group_gets_sigterm_first(sandbox: LocalSandbox, workspace: Path) -> None:
    inner = "trap 'echo bye > got-term; exit 0' TERM; sleep 30 & wait"
    result = sandbox.exec(f"sh -c \"{inner}\"; echo never", 0.5)
    assert result.timed_out and "never" not in result.stdout
    assert (workspace / "got-term").read_text() == "bye\n"  # a grandchild's shell could clean up


def test_a_process_ignoring_sigterm_is_killed_after_the_grace(workspace: Path) -> None:
    sandbox = LocalSandbox(workspace, kill_grace_s=0.3)
    started = time.monotonic()
    result = sandbox.exec("trap '' TERM; echo $$ > shell.pid; sleep 30 & wait; sleep 30", 0.3)
    assert result.timed_out and time.monotonic() - started < 3
    assert not _alive(int((workspace / "shell.pid").read_text()))


def test_a_shell_that_closed_its_output_is_still_timed_out(sandbox: LocalSandbox) -> None:
    started = time.monotonic()
    result = sandbox.exec("exec >/dev/null 2>&1; sleep 30", 0.4)
    assert result.timed_out and time.monotonic() - started < 3


def test_output_is_capped_quickly_with_bounded_memory(workspace: Path) -> None:
    sandbox = LocalSandbox(workspace, max_output_bytes=1000)
    tracemalloc.start()
    try:
        started = time.monotonic()
        result = sandbox.exec("head -c 10000000 /dev/zero | tr '\\0' a; echo tail >&2", 20)
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.truncated and not result.timed_out and result.exit_code == 0
    assert result.stdout == "a" * 1000 + "\n[output truncated: 9999000 more bytes not shown]"
    assert result.stderr == "tail\n"
    assert elapsed < 10, elapsed
    assert peak < 2_000_000, peak  # 10 MB went through; only the head (and a read buffer) was held


def test_a_cut_multibyte_character_is_dropped_not_garbled(workspace: Path) -> None:
    sandbox = LocalSandbox(workspace, max_output_bytes=5)
    result = sandbox.exec("printf 'abcdé and more'")  # é is 2 bytes: the 5-byte head ends inside it
    assert result.stdout.startswith("abcd\n[output truncated: 11 more bytes")


def test_a_background_job_with_redirected_output_does_not_hold_the_command(sandbox: LocalSandbox, workspace: Path) -> None:
    started = time.monotonic()
    result = sandbox.exec("sleep 30 > /dev/null 2>&1 & echo $! > bg.pid; echo started", 10)
    assert result.stdout == "started\n" and not result.timed_out and time.monotonic() - started < 2
    pid = int((workspace / "bg.pid").read_text())
    try:
        assert _alive(pid)  # a service the agent started keeps running
    finally:
        os.kill(pid, 9)


def test_a_background_job_holding_the_pipes_does_not_hold_the_command(sandbox: LocalSandbox, workspace: Path) -> None:
    started = time.monotonic()
    result = sandbox.exec("sleep 30 & echo $! > bg.pid; echo started", 10)
    assert result.stdout == "started\n" and not result.timed_out and result.exit_code == 0
    assert time.monotonic() - started < 2
    os.kill(int((workspace / "bg.pid").read_text()), 9)


def test_timeouts_must_be_positive(sandbox: LocalSandbox) -> None:
    with pytest.raises(ValueError):
        sandbox.exec("true", 0)


def test_files_round_trip_in_the_workspace(sandbox: LocalSandbox, workspace: Path) -> None:
    sandbox.write_file("notes/today.txt", "héllo\n")
    target = workspace / "notes" / "today.txt"
    assert target.read_text() == "héllo\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o700
    assert sandbox.read_file("notes/today.txt") == "héllo\n"
    assert sandbox.read_file(str(target)) == "héllo\n"
    assert sandbox.exec("cat notes/today.txt").stdout == "héllo\n"


def test_tilde_is_the_workspace_like_the_commands_home(sandbox: LocalSandbox, workspace: Path) -> None:
    sandbox.write_file("~/deep/a/b.txt", "x")
    assert (workspace / "deep" / "a" / "b.txt").read_text() == "x"
    assert sandbox.exec("cat ~/deep/a/b.txt").stdout == "x"
    assert sandbox.read_file("~/deep/a/b.txt") == "x"


def test_writes_replace_atomically_with_mode_0600(sandbox: LocalSandbox, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("old")
    target.chmod(0o644)
    sandbox.write_file(str(target), "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".elsewhere")] == []


def test_reading_a_missing_file_raises(sandbox: LocalSandbox) -> None:
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("nope.txt")


def test_ports_are_localhost(sandbox: LocalSandbox) -> None:
    assert sandbox.expose_port(8080) == PortInfo(8080, "http://localhost:8080")
    assert sandbox.remove_port(8080) is None

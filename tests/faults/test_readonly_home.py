"""A read-only home: ``automaton-min run`` on a home it cannot write gives one line naming the directory or file,
the cause and the fix (``chown``/``chmod``), exit 1, no traceback, and writes nothing.

How: the home (or ``state.db`` in it) is made read-only with ``chmod``. Root ignores modes through
CAP_DAC_OVERRIDE, so as root the child drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from its bounding set
before it executes (``prctl(PR_CAPBSET_DROP)``): it stays uid 0 but the kernel then applies the modes to it as
to anyone (checked first with a probe write; skipped with the reason where the drop is not allowed).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from conftest import CREATOR, keep_offline, program

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def _drop_dac_override() -> None:
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) refused")


def run_confined(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*program(), *args], preexec_fn=_drop_dac_override,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)


@pytest.fixture
def set_up_home(cli, home):
    result = cli("setup", "--name", "ada", "--genesis-prompt", "Keep notes.", "--creator-address", CREATOR,
                 "--openai-base-url", "http://127.0.0.1:9", "--inference-model", "scripted-model", "--yes")
    assert result.code == 0, result.stderr
    keep_offline(home)
    return home


@pytest.fixture
def read_only(set_up_home):
    """Make a path read-only for the test's children; modes restored afterwards (pytest must clean up)."""
    changed = []

    def make(path, mode: int) -> None:
        changed.append((path, path.stat().st_mode & 0o7777))
        path.chmod(mode)
        probe = subprocess.run([sys.executable, "-c", f"open({str(path / '.probe') if path.is_dir() else str(path)!r}, 'a')"],
                               preexec_fn=_drop_dac_override, capture_output=True, text=True)
        if probe.returncode == 0:
            pytest.skip("this process can write through a read-only mode here (root whose capabilities cannot be dropped)")

    try:
        yield make
    finally:
        for path, mode in reversed(changed):
            path.chmod(mode)


def assert_one_line(result: subprocess.CompletedProcess, *needles: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert len(lines) == 1 and "Traceback" not in result.stderr + result.stdout, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_home_never_run_that_is_read_only(set_up_home, read_only) -> None:
    home = set_up_home
    before = sorted(p.name for p in home.root.iterdir())
    read_only(home.root, 0o500)
    result = run_confined("run")
    assert_one_line(result, f"{home.root} is not writable", "Permission denied", "chmod 700")
    assert sorted(p.name for p in home.root.iterdir()) == before  # not even run.lock


def test_a_home_that_has_run_before_and_is_now_read_only(set_up_home, read_only) -> None:
    home = set_up_home
    (home.root / "run.lock").touch(mode=0o600)  # what every earlier run leaves (the lock file stays)
    read_only(home.root, 0o500)
    result = run_confined("run")
    assert_one_line(result, f"{home.root} is not writable", "chown")


def test_a_read_only_database_in_a_writable_home(set_up_home, read_only) -> None:
    home = set_up_home
    read_only(home.root / "state.db", 0o400)
    result = run_confined("run")
    assert_one_line(result, f"{home.root / 'state.db'} is not writable", "chmod 600")

"""``crash_point``: SIGKILL at the named point (its N-th reaching with ``name:N``), nothing otherwise."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

SCRIPT = ("from automaton_min.crashpoint import crash_point\n"
          "for i in range(3):\n"
          "    crash_point('other'); crash_point('here'); print(i, flush=True)\n")


def run(spec: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AUTOMATON_CRASH_AT"}
    if spec is not None:
        env["AUTOMATON_CRASH_AT"] = spec
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=30)


def test_unset_or_other_names_do_nothing() -> None:
    for spec in (None, "", "elsewhere", "her"):
        result = run(spec)
        assert result.returncode == 0 and result.stdout.split() == ["0", "1", "2"]


def test_named_point_kills_the_process_the_nth_time() -> None:
    first = run("here")
    assert first.returncode == -signal.SIGKILL and first.stdout == ""
    assert "crash point here reached (1): SIGKILL" in first.stderr
    second = run("here:2")
    assert second.returncode == -signal.SIGKILL and second.stdout.split() == ["0"]

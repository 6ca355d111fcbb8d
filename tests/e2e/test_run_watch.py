"""Watching a running agent: the start banner, one line per tool call, one run per home, and ``status``.

A real ``run`` talks to a loopback model scripted to fail one turn (an answer with no choices),
run ``exec``, then ``sleep``; the tests wait on its log lines (events), never on time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from automaton_min.errors import EXIT_USAGE
from automaton_min.home import Home

from conftest import CREATOR, keep_offline
from standins.model_servers import OpenAIServer, openai_answer
from test_run import wait_for_line


@dataclass
class Running:
    proc: subprocess.Popen
    lines: list[str]

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.lines if line.startswith("{")]


def start_run(home: Home) -> subprocess.Popen:
    env = {**os.environ, "AUTOMATON_HOME": str(home.root)}
    return subprocess.Popen([sys.executable, "-m", "automaton_min", "run"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)


def stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.fixture
def running(cli, home) -> Iterator[Running]:
    """An agent that has failed one turn, run ``exec``, and gone to sleep; stopped afterwards."""
    with OpenAIServer(mode="llamacpp") as model:
        model.script(
            {"id": "chatcmpl-empty", "object": "chat.completion", "choices": []},
            openai_answer("Note.", [("call_0", "exec", json.dumps({"command": "echo watched"}))]),
            openai_answer("Done.", [("call_0", "sleep", json.dumps({"duration_seconds": 3600, "reason": "all done"}))]),
        )
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Write notes.", "--creator-address", CREATOR,
                    "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
        assert setup.code == 0, setup.stderr
        keep_offline(home)
        proc = start_run(home)
        lines: list[str] = []
        try:
            assert wait_for_line(proc, '"msg":"asleep"', lines), "".join(lines)
            yield Running(proc, lines)
        finally:
            stop(proc)


def test_banner_names_the_agent_model_provider_and_confinement(cli, running):
    banner = next(r for r in running.records() if r["msg"] == "automaton-min started")
    status = json.loads(cli("status", "--json").stdout)
    assert banner["agent"] == "ada"
    assert banner["address"] == status["address"]
    assert banner["model"] == "scripted-model"
    assert banner["provider"] == "compatible"
    assert banner["confinement"]  # described by the confinement work; "unknown" until the agent says
    assert running.records().index(banner) < next(i for i, r in enumerate(running.records()) if r["msg"].startswith("tool "))


def test_one_line_per_tool_call(running):
    calls = [r for r in running.records() if r.get("tool")]
    assert [c["tool"] for c in calls] == ["exec", "sleep"]
    exec_call = calls[0]
    assert exec_call["msg"].startswith("tool exec ok (") and exec_call["ok"] is True
    assert "echo watched" in exec_call["arguments"] and len(exec_call["arguments"]) <= 80
    assert isinstance(exec_call["durationMs"], int)


def test_a_second_run_on_the_same_home_exits_2_naming_the_pid(cli, running):
    second = cli("run", timeout=30)
    assert second.code == EXIT_USAGE, second.stderr
    assert len(second.stderr_lines) == 1 and "Traceback" not in second.stderr
    assert f"pid {running.proc.pid}" in second.stderr_lines[0]
    assert running.proc.poll() is None  # the first run is untouched


def test_status_shows_running_then_stopped_and_the_last_error(cli, running):
    status = json.loads(cli("status", "--json").stdout)
    assert status["running"] is True and status["pid"] == running.proc.pid
    assert "no choices" in status["lastError"]["message"]
    assert status["lastError"]["at"].endswith("Z")
    text = cli("status").stdout
    assert f"running (pid {running.proc.pid})" in text and "no choices" in text

    assert stop(running.proc) == 0
    after = json.loads(cli("status", "--json").stdout)
    assert after["running"] is False and after["pid"] is None
    assert "stopped" in cli("status").stdout


def test_a_run_killed_outright_leaves_no_stale_lock(cli, running):
    running.proc.kill()
    running.proc.wait(timeout=30)
    assert json.loads(cli("status", "--json").stdout)["running"] is False

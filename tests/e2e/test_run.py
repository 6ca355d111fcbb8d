"""Acceptance: a newcomer's `automaton-min run` against a loopback model that answers with tool calls.

The agent runs `exec` and `write_file` in its workspace, sees the first result in the next turn's
context, calls `sleep`; SIGTERM ends the process with 0; `status` shows the turns and the sleeping state.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

from conftest import CREATOR, keep_offline
from standins.model_servers import OpenAIServer, openai_answer


def wait_for_line(proc: subprocess.Popen, needle: str, seen: list[str], timeout_s: float = 60) -> bool:
    """Read the process's log lines until one contains ``needle`` (an event, not a sleep)."""
    found = threading.Event()

    def reader() -> None:
        for line in proc.stdout:
            seen.append(line)
            if needle in line:
                found.set()
                return

    threading.Thread(target=reader, daemon=True).start()
    return found.wait(timeout_s)


def test_run_executes_tools_remembers_and_sleeps(cli, home) -> None:
    with OpenAIServer(mode="llamacpp") as model:
        model.script(
            openai_answer("Let me leave a note.", [("call_0", "exec", json.dumps({"command": "echo hello-from-exec > note.txt && cat note.txt"}))]),
            openai_answer(None, [("call_0", "write_file", json.dumps({"path": "plan.md", "content": "1. earn\n"}))]),
            openai_answer("Done for now.", [("call_0", "sleep", json.dumps({"duration_seconds": 3600, "reason": "nothing left to do"}))]),
        )
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Write notes.", "--creator-address", CREATOR,
                    "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
        assert setup.code == 0, setup.stderr
        keep_offline(home)

        env = {**os.environ, "AUTOMATON_HOME": str(home.root)}
        proc = subprocess.Popen([sys.executable, "-m", "automaton_min", "run"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, env=env)
        seen: list[str] = []
        errors: list[str] = []
        threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True).start()  # a full pipe must not block it
        try:
            assert wait_for_line(proc, '"msg":"asleep"', seen), "".join(seen + errors)
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = None
            rest = proc.stdout.read() if code is None else ""
            assert code == 0, "".join(seen[-20:]) + rest[-5000:] + "".join(errors)[-5000:]
        finally:
            if proc.poll() is None:
                proc.kill()
        requests = [r.body for r in model.requests]

    assert model.rejections == []
    assert len(requests) == 3
    # the second call's context carries the exec result the first turn produced
    second = requests[1]["messages"]
    assert any(m.get("role") == "tool" and "hello-from-exec" in (m.get("content") or "") for m in second)
    workspace = home.root / "workspace"
    assert (workspace / "note.txt").read_text().strip() == "hello-from-exec"
    assert (workspace / "plan.md").read_text() == "1. earn\n"

    status = json.loads(cli("status", "--json").stdout)
    assert status["turns"] == 3 and status["state"] == "sleeping"


def test_run_without_setup_says_how_to_set_up(cli) -> None:
    result = cli("run")
    assert result.code == 2 and result.stderr_lines == [result.stderr_lines[-1]]
    assert "automaton-min setup" in result.stderr and "Traceback" not in result.stderr


def test_run_without_a_usable_model_exits_2_with_the_fix(cli, home) -> None:
    setup = cli("setup", "--name", "ada", "--genesis-prompt", "Write notes.", "--creator-address", CREATOR, "--yes")
    assert setup.code == 0, setup.stderr
    keep_offline(home)
    result = cli("run", timeout=30)  # before: five logged errors, then a five-minute sleep
    assert result.code == 2, result.stderr
    assert len(result.stderr_lines) == 1 and "Traceback" not in result.stderr
    assert "no provider can serve gpt-5.2" in result.stderr and "openaiBaseUrl" in result.stderr
    assert json.loads(cli("status", "--json").stdout)["state"] != "running"


def test_run_with_a_refused_key_exits_2_naming_the_key(cli, home) -> None:
    with OpenAIServer(mode="llamacpp", api_key="sk-local-server-key-123") as model:
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Write notes.", "--creator-address", CREATOR,
                    "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
        assert setup.code == 0, setup.stderr
        keep_offline(home)
        result = cli("run", timeout=30)
    assert result.code == 2 and len(result.stderr_lines) == 1, result.stderr
    assert "401" in result.stderr and "openaiApiKey" in result.stderr
    assert len(model.requests) == 1  # refused once; not retried and not repeated

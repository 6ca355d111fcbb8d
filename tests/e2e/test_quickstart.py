"""The README's quick start, run as written: its commands in a fresh home, with a loopback stand-in for the model.

The quick start is the first fenced block of README.md, and it must sit in the file's first 20 lines. Its install
line (a virtualenv, then ``pip install`` of the clone) is only checked as text, with the ``automaton-min`` script it
installs checked in pyproject.toml: the test runs in an environment where the project is already installed. Every
``automaton-min`` line is run for real through ``conftest.program()`` (the source tree, or the one-file binary):
``setup`` answered on stdin as a person answers the wizard (the model step pointed at the stand-in), ``run`` in the
background until the agent sleeps, the other commands while it runs ("in another terminal"), a ``--follow`` until
it has shown the turns; then one SIGINT (Ctrl-C) stops each running command, which must exit 0.

The home is the default one, ``~/.automaton`` under a temporary ``$HOME`` (no ``AUTOMATON_HOME``, no ``--home``),
and the relay and RPC node are closed loopback ports, set through their environment overrides so the commands stay
as the README prints them. The same run checks the README's sample of ``logs`` output (``<!-- logs-sample -->``),
times, durations and the home's path aside.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import tempfile
import tomllib
from pathlib import Path

import pytest

from conftest import _SCRUBBED_ENV, CREATOR, RunningAgent, program
from standins.model_servers import OpenAIServer, openai_answer

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
QUICK_START_LINES = 20
PURPOSE = "Write a haiku about the sea into haiku.txt, then sleep."
HAIKU = "Grey waves fold and break\nsalt wind combs the empty shore\nthe tide keeps its time\n"
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens there


def quick_start() -> list[str]:
    """The command lines of README.md's first fenced block, which must open and close within its first 20 lines."""
    lines = README.read_text().splitlines()
    fences = [i for i, line in enumerate(lines) if line.startswith("```")]
    assert len(fences) >= 2, "README.md has no fenced block"
    start, end = fences[0], fences[1]
    assert end < QUICK_START_LINES, f"the quick start's block ends on line {end + 1}, past line {QUICK_START_LINES}"
    return [line for line in lines[start + 1:end] if line.strip() and not line.lstrip().startswith("#")]


def logs_sample() -> list[str]:
    """The lines of the README's sample of ``logs`` output."""
    text = README.read_text()
    assert "<!-- logs-sample -->" in text, "README.md lost its <!-- logs-sample --> marker"
    after = text.split("<!-- logs-sample -->", 1)[1].lstrip("\n").splitlines()
    assert after[0].startswith("```"), "the logs sample's fence must follow its marker"
    return after[1:after.index("```", 1)]


def comparable(lines: list[str], home: str) -> list[str]:
    """Log lines with what changes from run to run (times, durations, the home's path) made the same."""
    out = []
    for line in lines:
        line = line.replace(home, "~/.automaton")
        line = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", "<time>", line)
        out.append(re.sub(r"  \d+ ms$", "  <n> ms", line))
    return out


class Background(RunningAgent):
    """A command left running, its output lines (stdout and stderr) collected as they come."""

    def ctrl_c(self, timeout_s: float = 60) -> int:
        """One SIGINT, as one Ctrl-C sends; the exit code once the output is read to its end."""
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.proc.args[-2:]} did not stop on Ctrl-C:\n" + "".join(self.lines[-40:])) from None
        with self._cond:
            self._cond.wait_for(lambda: self._ended, timeout_s)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def scripted_model(body: dict) -> dict:
    """The stand-in's answers: the wizard's tiny request (no tools) gets "OK"; the agent's turns get write_file,
    then sleep, as a model that follows the purpose would."""
    if not body.get("tools"):
        return openai_answer("OK")
    turns = sum(1 for m in body["messages"] if m.get("role") == "tool")  # one tool result per turn taken so far
    if turns == 0:
        return openai_answer("I'll write the haiku first.",
                             [("call_0", "write_file", json.dumps({"path": "haiku.txt", "content": HAIKU}))])
    return openai_answer("The haiku is written; nothing else to do.",
                         [("call_0", "sleep", json.dumps({"duration_seconds": 3600, "reason": "the haiku is in haiku.txt"}))])


@pytest.fixture
def user_home():
    """A short temporary $HOME (a long one would cut the logs' result lines where the sample's are whole)."""
    with tempfile.TemporaryDirectory(prefix="qs-") as root:
        yield Path(root)


def test_the_install_line_installs_this_clone_and_its_command() -> None:
    install = [line for line in quick_start() if not line.startswith("automaton-min")]
    assert len(install) == 1, install
    assert re.fullmatch(r"python3 -m venv (\S+) && \. \1/bin/activate && pip install (-e )?\.", install[0]), install[0]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts.get("automaton-min") == "automaton_min.cli.main:main"


def test_the_quick_start_runs_as_written(user_home: Path) -> None:
    from test_cli import interview

    commands = [shlex.split(line, comments=True) for line in quick_start() if line.startswith("automaton-min")]
    assert [argv[1] for argv in commands][:2] == ["setup", "run"], commands
    assert {"status", "logs"} <= {argv[1] for argv in commands}, commands

    env = {k: v for k, v in os.environ.items() if k not in (*_SCRUBBED_ENV, "AUTOMATON_HOME")}
    env.update(HOME=str(user_home), AUTOMATON_RPC_URL=CLOSED, SOCIAL_RELAY_URL=CLOSED)
    home = user_home / ".automaton"
    running: list[Background] = []
    agent: Background | None = None
    shown: list[str] = []  # what logs printed

    with OpenAIServer(mode="llamacpp", models=[{"id": "gemma-3-270m"}]) as model:
        model.script(*[scripted_model] * 8)
        try:
            for argv in commands:
                argv = [*program(), *argv[1:]]
                subcommand = argv[len(program())]
                if subcommand == "setup":
                    answers = interview(genesis=PURPOSE, creator=CREATOR, base_url=model.url + "/v1")
                    result = subprocess.run(argv, input=answers, env=env, capture_output=True, text=True,
                                            timeout=60, start_new_session=True)  # no terminal: the wizard reads stdin
                    assert result.returncode == 0, result.stdout + result.stderr
                    assert f"is set up in {home}" in result.stdout, result.stdout
                    assert "gemma-3-270m answered in" in result.stdout, result.stdout
                elif subcommand == "run":
                    agent = Background(env, argv)
                    running.append(agent)
                    agent.wait_for('"msg":"asleep"')
                elif "-f" in argv or "--follow" in argv:
                    watcher = Background(env, argv)
                    running.append(watcher)
                    watcher.wait_for("ended: slept")
                    assert watcher.ctrl_c() == 0, "".join(watcher.lines)
                    shown = [line.rstrip("\n") for line in watcher.lines]
                else:
                    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
                    assert result.returncode == 0, result.stdout + result.stderr
                    assert "Traceback" not in result.stderr
                    if subcommand == "status":
                        assert "running (pid" in result.stdout and "sleeping" in result.stdout, result.stdout
                    if subcommand == "logs":
                        shown = result.stdout.splitlines()
            assert agent is not None
            assert agent.ctrl_c() == 0, "".join(agent.lines)
            assert any('"msg":"stopped"' in line for line in agent.lines), "".join(agent.lines[-10:])
        finally:
            for each in running:
                each.kill()
        assert model.rejections == []

    assert (home / "workspace" / "haiku.txt").read_text() == HAIKU
    assert comparable(shown, str(home)) == comparable(logs_sample(), str(home))

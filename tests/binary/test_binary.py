"""Smoke suite for the one-file executable (build/build.sh makes dist/automaton-min).

Skipped unless ``AUTOMATON_BINARY`` names the binary. Every command runs the binary as a subprocess with a bare
environment: ``PATH=/usr/bin:/bin`` and a fresh ``HOME``, no virtualenv, no ``AUTOMATON_*``, so the default home
``~/.automaton`` is used and nothing of the development install can help it. The agent stays on loopback: its
model is a stand-in server, ``rpcUrl`` a closed loopback port, the social relay off.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import orjson
import pytest

from automaton_min import __version__
from automaton_min.cli.main import COMMANDS
from automaton_min.confine.landlock import abi_version
from conftest import CREATOR, OFFLINE, RunningAgent
from standins.model_servers import OpenAIServer, openai_answer

BINARY = os.environ.get("AUTOMATON_BINARY", "")
pytestmark = pytest.mark.skipif(not BINARY, reason="set AUTOMATON_BINARY to the built binary (build/build.sh makes dist/automaton-min)")


@pytest.fixture(scope="module")
def binary() -> str:
    """The binary's absolute path; a variable that names no executable file fails the suite instead of skipping it."""
    path = Path(BINARY).absolute()
    assert path.is_file() and os.access(path, os.X_OK), f"AUTOMATON_BINARY={BINARY} is not an executable file"
    return str(path)


class Bare:
    """The binary with a bare environment and its own HOME (``tmp/user``): the home is ``tmp/user/.automaton``."""

    def __init__(self, binary: str, tmp: Path) -> None:
        self.binary = binary
        self.user = tmp / "user"
        self.user.mkdir(mode=0o700)
        self.home = self.user / ".automaton"
        self.env = {"PATH": "/usr/bin:/bin", "HOME": str(self.user)}

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        result = subprocess.run([self.binary, *args], env=self.env, stdin=subprocess.DEVNULL, capture_output=True,
                                text=True, timeout=timeout, cwd=self.user)
        assert "Traceback" not in result.stderr, result.stderr
        return result

    def setup(self, model_url: str = "http://127.0.0.1:9", **config) -> None:
        """Non-interactive setup as a user types it, then the loopback-only settings (``OFFLINE``) and ``config``."""
        result = self("setup", "--name", "ada", "--genesis-prompt", "Write notes.", "--creator-address", CREATOR,
                      "--openai-base-url", model_url, "--inference-model", "scripted-model", "--yes")
        assert result.returncode == 0, result.stderr
        path = self.home / "automaton.json"
        path.write_bytes(orjson.dumps({**orjson.loads(path.read_bytes()), **OFFLINE, **config}))


@pytest.fixture
def bare(binary: str, tmp_path: Path) -> Bare:
    return Bare(binary, tmp_path)


def test_version(bare: Bare) -> None:
    result = bare("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"automaton-min {__version__}", result


def test_every_command_is_in_the_binary(bare: Bare) -> None:
    """The CLI imports command modules by name when they run: each one's --help proves it was bundled."""
    listed = bare("--help")
    assert listed.returncode == 0, listed.stderr
    for name in COMMANDS:
        result = bare(name, "--help")
        assert result.returncode == 0 and "Usage:" in result.stdout, (name, result.stderr)


def test_init_setup_status_and_doctor_in_a_new_home(bare: Bare) -> None:
    init = bare("init")
    assert init.returncode == 0, init.stderr
    created = json.loads(init.stdout)
    assert created["isNew"] is True and created["home"] == str(bare.home)
    assert (bare.home / "wallet.json").stat().st_mode & 0o777 == 0o600

    with OpenAIServer(mode="llamacpp", models=[{"id": "scripted-model", "object": "model"}]) as model:
        model.script(openai_answer("OK"))  # doctor's one tiny request to a local model
        bare.setup(model.url)
        status = bare("status", "--json")
        assert status.returncode == 0, status.stderr
        shown = json.loads(status.stdout)
        assert (shown["name"], shown["address"], shown["creator"]) == ("ada", created["address"], CREATOR)
        assert shown["running"] is False and shown["turns"] == 0 and shown["version"] == __version__

        # doctor's contract: exit 0 when every check passed, 1 when any failed; --json says which
        doctor = bare("doctor", "--json")
        report = json.loads(doctor.stdout)
        assert doctor.returncode == (0 if report["ok"] else 1), doctor
        checks = {check["name"]: check for check in report["checks"]}
        failed = [check for name, check in checks.items() if not check["ok"] and name != "confinement"]
        assert failed == [], failed
        # local mode: doctor starts the confined spawner, which a frozen binary runs as itself (__confined-spawner__)
        assert "confinement" in checks
        if abi_version() >= 1:
            assert checks["confinement"]["ok"], checks["confinement"]
            assert checks["confinement"]["detail"].startswith("landlock")
        model.script(openai_answer("OK"))
        text = bare("doctor")
    assert text.returncode == doctor.returncode and "database integrity" in text.stdout
    assert checks["model server"]["ok"], checks["model server"]  # the frozen binary asked the model too

    # HTTPS through requests with certifi's CA bundle from the binary: a refused connection, not a missing bundle
    bare.env["AUTOMATON_RPC_URL"] = "https://127.0.0.1:9"
    wallet = bare("wallet", "--json")
    assert wallet.returncode == 1 and "ConnectionError" in json.loads(wallet.stdout)["error"], wallet
    del bare.env["AUTOMATON_RPC_URL"]
    heartbeat = bare("heartbeat", "list", "--json")
    assert heartbeat.returncode == 0 and json.loads(heartbeat.stdout), heartbeat


def call(name: str, **arguments) -> tuple[str, str, str]:
    return ("call_0", name, json.dumps(arguments))


class Running(RunningAgent):
    """``BINARY run`` with the bare environment."""

    def __init__(self, bare: Bare) -> None:
        super().__init__(bare.env, [bare.binary, "run"], cwd=bare.user)


def test_run_takes_turns_against_a_loopback_model_and_sigterm_exits_0(bare: Bare) -> None:
    with OpenAIServer(mode="llamacpp") as model:
        model.script(
            openai_answer("Let me leave a note.", [call("exec", command="echo hello-from-exec > note.txt && cat note.txt")]),
            openai_answer(None, [call("write_file", path="plan.md", content="1. earn\n")]),
            openai_answer("Done for now.", [call("sleep", duration_seconds=3600, reason="nothing left to do")]),
        )
        # a 4,096-token window, direct turns (the whole prompt, not a small model's two steps): the prompt is sized
        # near the limit, so the exact tokenizer (the bundled cl100k_base file, its sha256 checked) is loaded
        bare.setup(model.url, modelStrategy={"contextWindow": 4096}, actionMode="direct")
        agent = Running(bare)
        try:
            agent.wait_for('"msg":"asleep"')
            signalled = agent.proc.poll() is None
            code = agent.stop()
        finally:
            agent.stop()
        requests = [r.body for r in model.requests]

    log = "".join(agent.lines)
    assert signalled and code == 0 and "Traceback" not in log, log
    assert model.rejections == [] and len(requests) == 3, log
    assert any(m.get("role") == "tool" and "hello-from-exec" in (m.get("content") or "") for m in requests[1]["messages"])
    assert "exact token counting unavailable" not in log
    assert "exact token counter loaded" in log, "the exact token counter was never loaded"
    banner = next(json.loads(line) for line in agent.lines if '"msg":"automaton-min started"' in line)
    assert banner["model"] == "scripted-model" and not banner["provider"].startswith("none"), banner
    if abi_version() >= 1:
        assert banner["confinement"].startswith("landlock"), banner
    workspace = bare.home / "workspace"
    assert (workspace / "note.txt").read_text().strip() == "hello-from-exec"
    assert (workspace / "plan.md").read_text() == "1. earn\n"

    status = json.loads(bare("status", "--json").stdout)
    assert (status["turns"], status["state"], status["running"]) == (3, "sleeping", False)
    logs = bare("logs", "--json")
    assert logs.returncode == 0 and len(logs.stdout.splitlines()) == 3, logs


def test_service_install_copies_the_binary_into_the_state_directory(bare: Bare, tmp_path: Path) -> None:
    """As on a device: the unit runs the state directory's own copy, which it may update."""
    bare.setup()
    root = tmp_path / "root"
    result = bare("service", "install", "--root", str(root), "--no-user")
    assert result.returncode == 0, result.stderr
    unit = (root / "etc/systemd/system/automaton-min.service").read_text().splitlines()
    assert "ExecStart=/var/lib/automaton/bin/automaton-min --home /var/lib/automaton run" in unit
    copy = root / "var/lib/automaton/bin/automaton-min"
    assert copy.read_bytes() == Path(bare.binary).read_bytes() and os.access(copy, os.X_OK)

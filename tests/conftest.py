"""Shared fixtures: a private home for every test, an injectable clock, the CLI as a real subprocess."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from automaton_min.config import ENV_OVERRIDES
from automaton_min.home import Home
from automaton_min.log import ROOT_LOGGER

CREATOR = "0x1234567890AbcdEF1234567890aBcdef12345678"
START_MS = 1_795_342_530_250  # 2026-11-22T10:15:30.250Z

# Variables that would leak the developer's own setup into a test.
_SCRUBBED_ENV = (*ENV_OVERRIDES, "CONWAY_SANDBOX_ID", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    """Every test gets its own AUTOMATON_HOME (not yet created) and its own $HOME."""
    root = tmp_path / "automaton-home"
    monkeypatch.setenv("AUTOMATON_HOME", str(root))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    for name in _SCRUBBED_ENV:
        monkeypatch.delenv(name, raising=False)
    return Home(root)


@pytest.fixture(autouse=True)
def fresh_circuit_breakers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with closed breakers: failures a test provokes never open a breaker for the next one."""
    from automaton_min.net import resilient

    monkeypatch.setattr(resilient, "_registry", resilient.BreakerRegistry())


@pytest.fixture(autouse=True)
def fresh_message_rate_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with no sender over the inbox's rate limit: the process-wide limiter counts per sender, and
    tests on one fixed clock would otherwise add up one another's messages from the same address."""
    from automaton_min.social import injection

    monkeypatch.setattr(injection, "DEFAULT_LIMITER", injection.RateLimiter())


@pytest.fixture(autouse=True)
def reset_logging():
    """Leave the package logger as a fresh process has it after every test."""
    yield
    root = logging.getLogger(ROOT_LOGGER)
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.NOTSET)
    root.propagate = True  # configure_logging turns it off; caplog needs it on


class FixedClock:
    """A clock for code that takes ``now``: returns epoch ms and moves only when told."""

    def __init__(self, start_ms: int = START_MS) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def db(home: Home, clock):
    """An open, migrated state.db in the test's home, on the test's clock."""
    from automaton_min.store.db import open_database

    home.ensure()
    with open_database(home.default_db_path, now=clock) as database:
        yield database


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def program() -> list[str]:
    """The automaton-min under test: the one-file binary when ``AUTOMATON_BINARY`` names it (CI runs the crash and
    fault harnesses a second time that way), else this source tree's ``python -m automaton_min``."""
    binary = os.environ.get("AUTOMATON_BINARY", "")
    return [str(Path(binary).absolute())] if binary else [sys.executable, "-m", "automaton_min"]


class RunningAgent:
    """``automaton-min run`` as a subprocess whose output lines (stdout and stderr together) are read as they come,
    so a test waits on events, not sleeps. ``argv`` defaults to ``program()``; ``preexec_fn`` runs in the child
    before it starts (to enter a cgroup, say)."""

    def __init__(self, env: dict[str, str], argv: list[str] | None = None, cwd: Path | None = None,
                 preexec_fn=None) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._ended = False
        self.proc = subprocess.Popen(argv or [*program(), "run"], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     preexec_fn=preexec_fn)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, needle: str, count: int = 1, timeout_s: float = 90) -> None:
        """Until ``count`` lines hold ``needle`` (an assertion error with the output if the run ends first)."""
        def seen() -> bool:
            return sum(needle in line for line in self.lines) >= count

        with self._cond:
            self._cond.wait_for(lambda: seen() or self._ended, timeout_s)
            found = seen()
        assert found, f"never saw {needle!r} x{count}:\n" + "".join(self.lines)

    def stop(self, timeout_s: float = 60) -> int:
        """SIGTERM, then the exit code (an assertion error with the last output if it does not exit in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"SIGTERM did not stop the run within {timeout_s:g} s:\n" + "".join(self.lines[-40:])) from None
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def _run_cli(*args: str, input: str | None = None, env: dict[str, str] | None = None, timeout: float = 60) -> CliResult:
    """Run ``automaton-min ARGS`` (``program()``) as a real process with the test's environment."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run(
        [*program(), *args],
        input=input if input is not None else "",
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


# Remote services a running agent would call on its own (the USDC balance, the relay): closed or off, so a test
# never reaches past the loopback interface.
OFFLINE = {"rpcUrl": "http://127.0.0.1:9", "socialRelayUrl": ""}


def keep_offline(home: Home, **changes) -> None:
    """Point a set-up home's remote services at nothing (``OFFLINE``), then apply ``changes``."""
    import orjson

    stored = orjson.loads(home.config_path.read_bytes())
    home.config_path.write_bytes(orjson.dumps({**stored, **OFFLINE, **changes}))


@pytest.fixture
def cli():
    """Call as ``cli("status", "--json")``; returns a ``CliResult`` (code, stdout, stderr)."""
    return _run_cli


@pytest.fixture
def set_up(cli, home: Home) -> Home:
    """A home that has been through ``setup --yes`` (via the real CLI)."""
    result = cli("setup", "--name", "ada", "--genesis-prompt", "Earn your keep.", "--creator-address", CREATOR, "--yes")
    assert result.code == 0, result.stderr
    return home


# --------------------------------------------------------------------------- the agent in process


@pytest.fixture
def agent_clock(clock):
    """The clock in-process agents run on; a module whose agent meets a chain overrides it with the block time."""
    return clock


@pytest.fixture
def agent_for(cli, home, model, agent_clock):
    """Build agents with ``build_agent`` for this home, set up once through the real CLI against the module's
    ``model`` server; each call applies config changes first, ``None`` removing a key (``OFFLINE`` first, since
    the runtime would otherwise read USDC from the public Base node and poll the public relay); ``release``: the
    build children get their binary by. Spawners and databases are closed afterwards."""
    import orjson

    from automaton_min.config import load_config
    from automaton_min.runtime.agent_runtime import build_agent

    built = []

    def make(release=None, **config_changes):
        if not home.config_path.exists():
            result = cli("setup", "--name", "ada", "--genesis-prompt", "Write notes.", "--creator-address", CREATOR,
                         "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
            assert result.code == 0, result.stderr
        merged = {**orjson.loads(home.config_path.read_bytes()), **OFFLINE, **config_changes}
        home.config_path.write_bytes(orjson.dumps({k: v for k, v in merged.items() if v is not None}))
        agent = build_agent(home, load_config(home, {}), now=agent_clock, release=release)
        built.append(agent)
        return agent

    yield make
    for agent in built:
        agent.sandbox.close()
        agent.db.close()


# --------------------------------------------------------------------------- real chain peers (tests/standins)
# Module-scoped: a chain costs about a second to start. Imports are inside, so other tests never load eth-tester.


@pytest.fixture(scope="module")
def chain():
    """A real EVM (eth-tester + py-evm) with our EIP-3009 token at the USDC address, chain id 8453."""
    from standins.evm import LocalChain

    return LocalChain()


@pytest.fixture(scope="module")
def rpc(chain):
    """A JSON-RPC node on 127.0.0.1 serving ``chain``."""
    from standins.rpc_server import RpcServer

    with RpcServer(chain) as server:
        yield server


@pytest.fixture(scope="module")
def merchant():
    """The account the x402 servers are paid to."""
    from eth_account import Account
    from eth_utils import keccak

    return Account.from_key(keccak(text="standins-test:merchant"))


@pytest.fixture(scope="module")
def x402_v2(chain, merchant):
    """The x402 SDK's Flask middleware (protocol v2), settling on ``chain``."""
    from standins.x402_server import X402Server

    with X402Server(chain, pay_to=merchant.address, version=2) as server:
        yield server


@pytest.fixture(scope="module")
def x402_v1(chain, merchant):
    """A protocol-v1 gate verified and settled by the SDK's v1 facilitator on ``chain``."""
    from standins.x402_server import X402Server

    with X402Server(chain, pay_to=merchant.address, version=1) as server:
        yield server


@pytest.fixture
def refuse_new_threads(monkeypatch: pytest.MonkeyPatch):
    """Arm it to make every later ``Thread.start`` fail as in a full pids cgroup (systemd TasksMax); the armed
    call returns the names of the threads refused from then on."""
    refused: list[str] = []

    def start(thread: threading.Thread) -> None:
        refused.append(thread.name)
        raise RuntimeError("can't start new thread")

    def arm() -> list[str]:
        monkeypatch.setattr(threading.Thread, "start", start)
        return refused

    return arm

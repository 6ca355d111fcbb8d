"""Acceptance for the long-lived service: `automaton-min run` as a real process against loopback stand-ins.

systemd hears READY=1 and STOPPING=1 on a test NOTIFY_SOCKET; `automaton-min wake` wakes a sleeping agent with its
reason; a message the creator signs and posts to the relay is polled (`heartbeat run check_social_inbox` asks the
daemon), stored, wakes the agent and is answered through the relay; SIGTERM in the middle of a long command ends
the process with 0 and leaves a consistent database.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from automaton_min.clock import system_now
from automaton_min.confine.landlock import abi_version
from automaton_min.store.db import open_database
from conftest import CREATOR, RunningAgent
from standins.model_servers import OpenAIServer, openai_answer
from standins.social_relay import SocialRelay


def call(name: str, **arguments) -> tuple[str, str, str]:
    return ("call_0", name, json.dumps(arguments))


SLEEP = openai_answer("Resting.", [call("sleep", duration_seconds=3600, reason="nothing to do")])


def run_agent(home: Path, env: dict[str, str] | None = None) -> RunningAgent:
    """`automaton-min run` on ``home`` from the source tree."""
    return RunningAgent({**os.environ, "AUTOMATON_HOME": str(home), **(env or {})},
                        [sys.executable, "-m", "automaton_min", "run"])


def set_up(cli, home, model_url: str, **config) -> None:
    result = cli("setup", "--name", "ada", "--genesis-prompt", "Answer your creator.", "--creator-address",
                 config.pop("creator", CREATOR), "--openai-base-url", model_url, "--inference-model", "scripted-model",
                 "--yes")
    assert result.code == 0, result.stderr
    stored = orjson.loads(home.config_path.read_bytes())
    home.config_path.write_bytes(orjson.dumps({**stored, "rpcUrl": "http://127.0.0.1:9", "socialRelayUrl": "", **config}))


def test_systemd_hears_ready_watchdog_and_stopping_and_wake_wakes_the_agent_with_its_reason(cli, home, tmp_path) -> None:
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify.sock"))
    notify.settimeout(60)
    with OpenAIServer(mode="llamacpp") as model:
        model.script(SLEEP, SLEEP)
        set_up(cli, home, model.url)
        agent = run_agent(home.root, {"NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": "1000000"})
        try:
            messages = []
            while "READY=1" not in messages:
                messages += notify.recv(4096).decode().split("\n")
            agent.wait_for('"msg":"asleep"')
            pings = messages.count("WATCHDOG=1")
            while messages.count("WATCHDOG=1") < pings + 2:  # asleep, both threads still show progress
                messages += notify.recv(4096).decode().split("\n")
            woke = cli("wake", "your", "creator", "left", "a", "note", "--json")
            assert woke.code == 0 and json.loads(woke.stdout)["pid"] == agent.proc.pid, woke.stderr
            agent.wait_for('"msg":"asleep"', count=2)
            assert agent.stop() == 0
            while not any(m.startswith("STOPPING=1") for m in messages):
                messages += notify.recv(4096).decode().split("\n")
        finally:
            agent.stop()
            notify.close()
        second_wakeup = model.requests[1].body["messages"][-1]["content"]
    assert "cli: your creator left a note" in second_wakeup
    with open_database(home.default_db_path) as db:
        assert db.scalar("SELECT COUNT(*) FROM wake_events WHERE consumed_at IS NULL") == 0
        assert db.scalar("SELECT COUNT(*) FROM wake_events") == 1  # stored once


def test_a_signed_message_from_the_creator_is_polled_wakes_the_agent_and_is_answered(cli, home) -> None:
    from eth_account import Account

    creator = Account.create()
    with OpenAIServer(mode="llamacpp") as model, SocialRelay(system_now) as relay:
        model.script(
            SLEEP,                                                                   # first cycle
            openai_answer(None, [call("system_synopsis")]),                          # woken: look around
            lambda body: openai_answer(None, [call("send_message", to_address=creator.address,
                                                   content="PONG: " + str("PING-42" in json.dumps(body)))]),
            SLEEP,
        )
        set_up(cli, home, model.url, creator=creator.address, socialRelayUrl=relay.url)
        agent = run_agent(home.root)
        try:
            agent.wait_for('"msg":"asleep"')
            wallet_address = json.loads(cli("status", "--json").stdout)["address"]
            relay.inject(relay.signed_message(bytes(creator.key), creator.address, wallet_address, "PING-42: are you there?"))
            asked = cli("heartbeat", "run", "check_social_inbox")
            assert asked.code == 0, asked.stderr
            agent.wait_for('"msg":"asleep"', count=2)
        finally:
            assert agent.stop() == 0
        replies = [m for m in relay.log if m["from"] == wallet_address.lower()]
    assert [(m["to"], m["content"]) for m in replies] == [(creator.address.lower(), "PONG: True")]
    with open_database(home.default_db_path) as db:
        (status, signer), = db.query("SELECT status, signed_by FROM inbox_messages")
        assert status == "processed" and signer.lower() == creator.address.lower()
        (input_source,) = db.query("SELECT input_source FROM turns WHERE input LIKE '%PING-42%'")[0]
        assert input_source == "inbox"


@pytest.mark.skipif(abi_version() < 1, reason="this kernel has no Landlock (the command runs confined)")
def test_sigterm_during_a_long_command_exits_0_and_leaves_a_consistent_database(cli, home) -> None:
    with OpenAIServer(mode="llamacpp") as model:
        model.script(openai_answer(None, [call("exec", command="echo started > began; sleep 120", timeout=300_000)]))
        set_up(cli, home, model.url, shutdownGraceSeconds=1)
        workspace = home.root / "workspace"
        workspace.mkdir(mode=0o700, exist_ok=True)
        os.mkfifo(workspace / "began")
        agent = run_agent(home.root)
        try:
            with open(workspace / "began", encoding="ascii") as began:  # the command is running
                assert began.read().strip() == "started"
            agent.proc.send_signal(signal.SIGTERM)
            assert agent.proc.wait(timeout=30) == 0
        finally:
            agent.stop()
    agent.wait_for("turn abandoned")
    wal = Path(str(home.default_db_path) + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # folded back at shutdown
    with open_database(home.default_db_path) as db:
        assert db.integrity_check() == ["ok"]
        assert db.scalar("SELECT COUNT(*) FROM turns") == 0  # the cut-off turn left nothing half-written
        assert db.scalar("SELECT value FROM kv WHERE key = 'agent_state'") == "sleeping"
        assert json.loads(db.scalar("SELECT value FROM kv WHERE key = 'last_run'"))["stoppedAt"]


def test_a_first_run_on_a_terminal_starts_the_setup_wizard(home) -> None:
    """On a terminal, `run` in a home that is not set up asks the wizard's questions instead of failing."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "automaton_min", "run"], stdin=follower, stdout=follower,
                            stderr=follower, env={**os.environ, "AUTOMATON_HOME": str(home.root)}, close_fds=True)
    os.close(follower)
    seen = b""
    try:
        while b"name" not in seen.lower():
            chunk = os.read(leader, 4096)
            if not chunk:
                break
            seen += chunk
    except OSError:  # the terminal closed
        pass
    finally:
        proc.kill()
        proc.wait(timeout=30)
        os.close(leader)
    assert b"setup wizard comes first" in seen and b"name" in seen.lower(), seen

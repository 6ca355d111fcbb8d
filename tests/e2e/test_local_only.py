"""Acceptance (issue 33, item 2): one local mode, and a quiet terminal.

``localOnly`` (one ``config set``, the wizard's last question, ``setup --local-only``) turns off the social relay and
the RPC node: the real ``automaton-min run`` on a pseudo-terminal prints one banner and its turns, and a relay and an
RPC node on loopback that record every request get none; ``doctor`` and ``status`` say those parts are off, not
unreachable; nothing is paid. ``init`` and ``setup`` on a terminal print what was made, where, and what to run next.
"""

from __future__ import annotations

import json

import orjson
import pytest

import terminal_kit
from conftest import CREATOR, program
from standins.loopback_http import LoopbackServer, Reply
from standins.model_servers import OpenAIServer, openai_answer

# What a turn prints at info (the loop's and the daemon's lines), and the stop that ends the test's run.
TURN_LINES = ("automaton_min.agent.states: agent state", "automaton_min.run: tool ",
              "automaton_min.agent.loop: sleeping", "automaton_min.runtime.daemon: asleep",
              "automaton_min.runtime.daemon: stop requested", "automaton_min.runtime.daemon: stopped")


@pytest.fixture
def model():
    with OpenAIServer(mode="llamacpp") as server:
        yield server


@pytest.fixture
def remote():
    """A social relay and an RPC node on loopback that answer every request (404) and record it."""
    with LoopbackServer({}) as relay, LoopbackServer({}) as rpc:
        yield relay, rpc


def set_up_with(cli, home, model_url: str, **changes) -> None:
    """``setup --yes`` against the model server, then ``changes`` written into automaton.json by hand."""
    result = cli("setup", "--name", "ada", "--genesis-prompt", "Keep notes.", "--creator-address", CREATOR,
                 "--openai-base-url", model_url, "--inference-model", "scripted-model", "--yes")
    assert result.code == 0, result.stderr
    stored = orjson.loads(home.config_path.read_bytes())
    home.config_path.write_bytes(orjson.dumps({**stored, **changes}))


def on_terminal(args: list[str], **how) -> tuple[int, str]:
    """The CLI under test on a pseudo-terminal (terminal_kit.on_terminal)."""
    return terminal_kit.on_terminal([*program(), *args], **how)


def test_a_local_only_run_on_a_terminal_prints_one_banner_and_its_turns_and_asks_no_relay_nor_rpc_node(
        cli, home, model, remote) -> None:
    relay, rpc = remote
    set_up_with(cli, home, model.url, socialRelayUrl=relay.url, rpcUrl=rpc.url, localOnly=True)
    model.script(openai_answer("A note first.", [("call_0", "write_file",
                                                   json.dumps({"path": "note.txt", "content": "hello"}))]),
                 openai_answer("Done.", [("call_0", "sleep", json.dumps({"duration_seconds": 3600,
                                                                        "reason": "the note is written"}))]))
    code, shown = on_terminal(["run"], stop_after="asleep")

    assert code == 0, shown
    lines = [line for line in shown.splitlines() if line.strip()]
    assert "automaton_min.run: automaton-min started" in lines[0], shown
    assert "parts=the Conway API off (no conwayApiKey); the social relay off (local only); the RPC node off (local " \
           "only)" in lines[0]
    assert all(any(kind in line for kind in TURN_LINES) for line in lines[1:]), shown  # its turns, nothing else
    assert [line.split()[1] for line in lines] == ["info"] * len(lines), shown
    for noise in ("unreachable", "start-up step", "migration", "heartbeat"):
        assert noise not in shown, noise
    assert relay.requests == [] and rpc.requests == []  # not at start, not from the heartbeat, not from a turn
    assert (home.root / "workspace" / "note.txt").read_text() == "hello"

    from automaton_min.store.db import open_database

    with open_database(home.default_db_path, read_only=True) as db:  # the heartbeat came to them and skipped them
        skipped = dict(db.query("SELECT task_name, error FROM heartbeat_history WHERE result = 'skipped'"))
    assert skipped["check_social_inbox"] == "the social relay is off (local only)"
    assert skipped["check_usdc_balance"] == skipped["reconcile_payments"] == "the RPC node is off (local only)"


def test_doctor_and_status_say_the_parts_a_local_only_agent_skips_are_off(cli, home, model, remote, clock) -> None:
    from automaton_min.clock import system_now
    from automaton_min.heartbeat.parts import PartStates
    from automaton_min.observe.clock_trust import HIGH_WATER_KEY, ClockTrust
    from automaton_min.store.db import open_database
    from automaton_min.store.kv import set_value

    relay, rpc = remote
    model.script(*[openai_answer("OK")] * 3)  # each doctor's tiny request to a local model
    set_up_with(cli, home, model.url, socialRelayUrl=relay.url, rpcUrl=rpc.url, localOnly=True)
    with open_database(home.default_db_path, now=clock) as db:  # a run before local mode found both down ...
        states = PartStates({"conway": None, "relay": relay.url, "rpc": rpc.url})
        states.unreachable(db, "relay", "timed out", clock(), say=False)
        states.unreachable(db, "rpc", "refused", clock(), say=False)
        set_value(db, HIGH_WATER_KEY, "2099-01-01T00:00:00.000Z", clock())  # ... and saw a time the clock is behind
        # where no time service has synchronized the clock, that makes it untrusted (a synchronized one stays so)
        untrusted = not ClockTrust().reading(db, system_now()).trusted

    text = cli("doctor")
    checks = {c["name"]: c for c in json.loads(cli("doctor", "--json").stdout)["checks"]}
    status = json.loads(cli("status", "--json").stdout)
    shown = cli("status").stdout

    assert text.code == 0 and text.stdout.rstrip().endswith("all checks passed"), text.stdout
    for name in ("relay", "rpc"):
        assert checks[name]["state"] == "off" and checks[name]["detail"] == "off: local only"
        assert checks[name]["fix"] == "automaton-min config set localOnly false"
        assert status["parts"][name] == {"state": "off", "url": None, "why": "local only"}
    if untrusted:  # relay messages are all the clock judges, and a local-only agent has none
        assert checks["clock"]["state"] == "off" and checks["clock"]["detail"].startswith("not needed while local")
    assert "unreachable since" not in text.stdout and "FAIL" not in text.stdout
    assert not any(line.startswith("down") for line in text.stdout.splitlines())
    assert "the social relay off (local only); the RPC node off (local only)" in shown
    assert "USDC           off (local only)" in shown and "unreachable" not in shown
    assert relay.requests == [] and rpc.requests == []

    set_up_with(cli, home, model.url, localOnly=False)  # the same home without local mode
    again = {c["name"]: c for c in json.loads(cli("doctor", "--json").stdout)["checks"]}
    assert again["relay"]["state"] == again["rpc"]["state"] == "unreachable"
    assert again["clock"]["state"] == ("fail" if untrusted else "ok")


def test_one_config_set_turns_local_only_on(cli, home, model) -> None:
    set_up_with(cli, home, model.url)
    on = cli("config", "set", "localOnly", "true")
    assert on.code == 0 and on.stdout.splitlines()[0] == "localOnly: (unset) -> true", on.stdout + on.stderr
    assert "Note: local only: no social relay and no RPC node" in on.stdout
    assert orjson.loads(home.config_path.read_bytes())["localOnly"] is True
    parts = json.loads(cli("status", "--json").stdout)["parts"]
    assert {name: part["state"] for name, part in parts.items()} == {"conway": "off", "relay": "off", "rpc": "off"}

    wrong = cli("config", "set", "localOnly", "yes")
    assert wrong.code == 2 and "localOnly: expected true or false" in wrong.stderr
    misspelt = cli("config", "set", "localonly", "false")
    assert misspelt.code == 2 and "did you mean localOnly?" in misspelt.stderr
    off = cli("config", "set", "localOnly", "false")
    assert off.code == 0 and off.stdout.splitlines()[0] == "localOnly: true -> false"
    assert json.loads(cli("status", "--json").stdout)["parts"]["rpc"]["state"] == "on"


def test_a_local_only_agent_signs_and_pays_nothing_and_says_why(cli, home, agent_for) -> None:
    from automaton_min.errors import AutomatonError
    from automaton_min.treasury.guard import Allowance, PaymentRefused
    from automaton_min.treasury.money_out import x402_limits, treasury_policy
    from automaton_min.treasury.topup import topup

    asks = {"x402Version": 1, "accepts": [], "error": "payment required"}
    with LoopbackServer({("GET", r"/.*"): lambda request: Reply(402, asks)}) as shop:
        agent = agent_for(localOnly=True, conwayApiUrl=shop.url)
        services = agent.loop.services
        allowance = Allowance(max_amount=10**6, asset="0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
                              network="eip155:8453")
        with pytest.raises(PaymentRefused, match="local only") as refused:
            services.payer.fetch(shop.url + "/report", allowance=allowance,
                                 limits=x402_limits(treasury_policy(agent.loop.config)), purpose="x402")
        assert "nothing is signed or paid" in str(refused.value)
        with pytest.raises(PaymentRefused, match="top-up of \\$5: the agent is local only"):
            topup(services.payer, shop.url, 5)
        with pytest.raises(AutomatonError, match="local only"):
            services.balances.usdc_atomic()
        assert [r.path for r in shop.requests] == ["/report"]  # asked once; the top-up never went out
    assert agent.db.scalar("SELECT COUNT(*) FROM payment_intents") == 0  # no authorization was made
    assert agent.relay is None and services.relay is None

    topped = cli("topup", "5")
    assert topped.code == 2 and len(topped.stderr_lines) == 1, topped.stderr
    assert "top-up refused: the agent is local only" in topped.stderr and "localOnly false" in topped.stderr
    wallet = json.loads(cli("wallet", "--json").stdout)
    assert wallet["usdc"] is None and wallet["localOnly"] is True and wallet["rpcUrl"] is None


def test_init_and_setup_on_a_terminal_say_what_they_made_without_log_lines(cli, home, model) -> None:
    code, shown = on_terminal(["init"])
    assert code == 0, shown
    address = json.loads(cli("init").stdout)["address"]  # piped: JSON, as scripts and a parent's spawn read it
    assert shown.splitlines() == [f"Made a wallet in {home.root}: {address}",
                                  f"  its key: {home.wallet_path} (mode 0600, never printed)",
                                  "Next, to make it an agent: automaton-min setup (or give the address to an agent's "
                                  "setup as its creator)"]

    code, shown = on_terminal(["setup", "--name", "ada", "--genesis-prompt", "Keep notes.", "--creator-address",
                               CREATOR, "--openai-base-url", model.url, "--inference-model", "scripted-model",
                               "--local-only", "--yes"])
    assert code == 0, shown
    assert shown.splitlines() == [
        f"ada is set up in {home.root}",
        f"  address     {address}",
        "  wallet      kept",
        "  wrote       automaton.json, SOUL.md, constitution.md, state.db",
        "  local only  yes: no social relay, no RPC node; it reads no balance and pays nothing",
        "Next, with scripted-model on your own server: automaton-min run (Ctrl-C stops it), and in another terminal "
        "automaton-min logs -f"]
    assert orjson.loads(home.config_path.read_bytes())["localOnly"] is True

    loud = cli("--log-level", "debug", "setup", "--no-local-only", "--yes")  # the log lines, when asked for
    assert loud.code == 0 and any('"msg":"opened database"' in line for line in loud.stderr_lines), loud.stderr
    assert orjson.loads(home.config_path.read_bytes())["localOnly"] is False


def test_the_wizard_asks_once_and_offers_local_only_for_a_server_of_ones_own(home, model) -> None:
    from test_cli import run_in_terminal

    model.script(openai_answer("OK"))  # the model step's one tiny request
    code, transcript = run_in_terminal(("setup",), [
        ("Name", "ada"), ("Genesis prompt", "Keep notes."), ("Creator address", CREATOR),
        ("Message for its first run", ""), ("Conway sandbox id", ""),
        ("OpenAI-compatible base URL", model.url + "/v1"), ("OpenAI API key", ""), ("Inference model", "gemma"),
        ("Anthropic API key", ""), ("Conway API key", ""), ("Local only? [Y/n]", ""),
    ])
    assert code == 0, transcript
    assert "no social relay and no RPC node: the agent then reads no balance, pays nothing" in transcript
    assert transcript.count("Local only?") == 1
    assert orjson.loads(home.config_path.read_bytes())["localOnly"] is True
    assert "local only  yes" in transcript

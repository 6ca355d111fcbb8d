"""Acceptance (issue 19, item 6): a local-only agent is quiet about the remote parts it does not have.

The real agent (``build_agent``, the start-up probe, the heartbeat as ``run_service`` assembles it, its tasks, the
metrics report and its alert rules, the JSON log lines ``run`` prints) with a loopback stand-in model, no Conway
key, and the relay and the RPC node at closed loopback ports; four hours of heartbeat passes, one a minute on the
test clock, and a turn every half hour.

Asserted: the start banner names the Conway API off and the relay and the RPC node unreachable; no later line
names them and nothing is logged at warning or above; no metric snapshot holds an alert; both are tried with a
back-off that grows to 30 minutes (not every 2 and 5 minutes); ``status`` says what the banner said, also how to
turn both off (local-only mode, ``localOnly``).
"""

from __future__ import annotations

import io
import json
import socket
import threading

import orjson

from conftest import CREATOR
from faults.support import SCRIPTED
from faults.support import fault_clock, model  # noqa: F401 (fixtures)
from automaton_min.clock import from_iso
from automaton_min.config import db_path, load_config
from automaton_min.log import configure_logging
from automaton_min.observe.metrics import Metrics
from automaton_min.runtime.agent_runtime import build_agent
from automaton_min.heartbeat.parts import PartStates, probe
from automaton_min.runtime.report import log_banner
from automaton_min.runtime.service import heartbeat_for
from automaton_min.store.wake import WakeBus
from automaton_min.store.db import open_database
from standins.model_servers import openai_answer

HOURS = 4
LOCAL_ONLY_HINT = ("to run local only (no social relay, no RPC node, nothing paid): automaton-min config set localOnly"
                   " true")
TURN_EVERY_MIN = 30


def closed_port_url() -> str:
    """A loopback URL where nothing listens (the port was free a moment ago)."""
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe_socket.getsockname()[1]}"


def rest() -> dict:
    return openai_answer("Nothing to do yet.", [("call_0", "sleep", json.dumps({"duration_seconds": TURN_EVERY_MIN * 60,
                                                                             "reason": "resting"}))])


def tries(db, task: str) -> list[int]:
    """Minutes between the task's runs that did not reach their part (each is one history row)."""
    started = [from_iso(at) for (at,) in db.query("SELECT started_at FROM heartbeat_history WHERE task_name = ?"
                                                  " AND result = 'failure' ORDER BY started_at", (task,))]
    return [(b - a) // 60_000 for a, b in zip(started, started[1:])]


def test_a_local_only_run_names_each_missing_part_once_and_raises_no_alert(cli, home, model, fault_clock) -> None:
    relay_url, rpc_url = closed_port_url(), closed_port_url()
    setup = cli("setup", "--name", "ada", "--genesis-prompt", "Keep notes.", "--creator-address", CREATOR,
                "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
    assert setup.code == 0, setup.stderr
    stored = orjson.loads(home.config_path.read_bytes())
    home.config_path.write_bytes(orjson.dumps({**stored, "socialRelayUrl": relay_url, "rpcUrl": rpc_url,
                                               "modelStrategy": {**stored.get("modelStrategy", {}), **SCRIPTED}}))
    config = load_config(home)
    out = io.StringIO()
    configure_logging("info", out)

    metrics = Metrics(now=fault_clock)
    agent = build_agent(home, config, now=fault_clock, metrics=metrics)
    parts = PartStates.of(config)
    probe(parts, agent.db, fault_clock())
    scheduler = heartbeat_for(home, config, agent, WakeBus(threading.Event()), parts, metrics, fault_clock)
    log_banner(agent, config, parts)
    heartbeat_db = open_database(db_path(home, config), now=fault_clock, quick_check=False)
    try:
        scheduler.prepare(heartbeat_db)
        for minute in range(HOURS * 60):
            scheduler.run_due(heartbeat_db, fault_clock())
            if minute % TURN_EVERY_MIN == 0:
                model.script(rest())
                agent.loop.run_cycle("the runtime started" if minute == 0 else "your sleep timer ran out")
            fault_clock.advance(60_000)
        snapshots = [alerts for (alerts,) in heartbeat_db.query("SELECT alerts_json FROM metric_snapshots")]
        relay_gaps, rpc_gaps = tries(heartbeat_db, "check_social_inbox"), tries(heartbeat_db, "check_usdc_balance")
        turns = heartbeat_db.scalar("SELECT COUNT(*) FROM turns")
    finally:
        scheduler.stop()
        heartbeat_db.close()
        agent.close()
    status = json.loads(cli("status", "--json").stdout)
    text = cli("status").stdout

    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    banner = next(line for line in lines if line["msg"] == "automaton-min started")
    assert banner["parts"] == (f"the Conway API off (no conwayApiKey); the social relay unreachable at {relay_url}"
                               f" (socialRelayUrl); the RPC node unreachable at {rpc_url} (rpcUrl); {LOCAL_ONLY_HINT}")
    for part in ("the social relay", relay_url, "the RPC node", rpc_url, "the Conway API", "breaker",
                 "ConnectionError"):
        assert [line for line in lines if part in json.dumps(line)] in ([banner], []), part
    assert [line for line in lines if line["level"] not in ("debug", "info")] == []
    assert turns == HOURS * 60 // TURN_EVERY_MIN
    assert len(snapshots) >= HOURS * 4 and set(snapshots) == {"[]"}
    for gaps in (relay_gaps, rpc_gaps):  # tried again after 2, 4, 8, 16, then every 30 minutes
        assert gaps == sorted(gaps) and gaps[:4] == [2, 4, 8, 16] and set(gaps[5:]) == {30}, gaps

    assert {name: part["state"] for name, part in status["parts"].items()} == {
        "conway": "off", "relay": "unreachable", "rpc": "unreachable"}
    assert status["parts"]["relay"]["url"] == relay_url and status["alerts"] == []
    assert "remote parts   the Conway API off (no conwayApiKey); the social relay unreachable since" in text
    hint = next(line for line in text.splitlines() if "to run" in line)  # the row under it, said as in the banner
    assert hint.strip() == LOCAL_ONLY_HINT
    assert hint.startswith(" " * len("  remote parts   "))

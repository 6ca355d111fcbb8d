"""What `status` and `run` load before the first model request: no signing library, no HTTP library, no tokenizer.

eth_keys (with eth_utils and pydantic) is only the tests' oracle (chain/secp256k1.py signs), as tiktoken is;
requests (urllib3, ssl) comes with the first request. Checked in a fresh interpreter's ``sys.modules``, after `status` has run
and after everything `run` builds before its loop: the agent (wallet, database, clients, tools, policy, the
confined sandbox, the start-up money step), the heartbeat scheduler and the banner.
"""

from __future__ import annotations

import json
import subprocess
import sys

from automaton_min.home import Home
from conftest import keep_offline

HEAVY = ("eth_keys", "eth_utils", "pydantic", "requests", "urllib3", "ssl", "tiktoken", "Crypto.Hash.keccak")

SCRIPT = """
import json, os, sys, threading
from pathlib import Path

from automaton_min.cli.main import cli

cli(["status", "--json"], standalone_mode=False)
after_status = [name for name in HEAVY if name in sys.modules]

from automaton_min.config import load_config
from automaton_min.heartbeat.parts import PartStates
from automaton_min.home import Home
from automaton_min.observe.metrics import Metrics
from automaton_min.runtime.agent_runtime import build_agent
from automaton_min.runtime.report import log_banner
from automaton_min.runtime.service import heartbeat_for
from automaton_min.store.wake import WakeBus

home = Home(Path(os.environ["AUTOMATON_HOME"]))
config = load_config(home)
metrics = Metrics()
agent = build_agent(home, config, metrics=metrics, service=True)
try:
    parts = PartStates.of(config)
    heartbeat_for(home, config, agent, WakeBus(threading.Event()), parts, metrics, agent.now)
    log_banner(agent, config, parts)
    after_run = [name for name in HEAVY if name in sys.modules]
finally:
    agent.close()
print(json.dumps({"status": after_status, "run": after_run, "address": agent.wallet.address}))
"""


def test_status_and_the_run_start_path_load_no_signing_http_or_tokenizer_library(cli, set_up: Home) -> None:
    keep_offline(set_up, socialRelayUrl="http://127.0.0.1:9")  # a relay client is built too (it signs when it polls)
    script = f"HEAVY = {HEAVY!r}\n{SCRIPT}"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded["status"] == [] and loaded["run"] == [], loaded
    assert loaded["address"] == json.loads(cli("status", "--json").stdout)["address"]

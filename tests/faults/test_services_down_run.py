"""Conway API, RPC node and relay all down under the real ``automaton-min run`` (``conftest.program()``: the source
tree, or the one-file binary when ``AUTOMATON_BINARY`` is set).

How: a first run with the Conway stand-in up stores the balance; then the balance endpoint answers 503, the RPC URL
and the relay URL are closed loopback ports, and the agent is started again. The scripted model checks its credits
and sends a message every turn.

Asserted: the process keeps running and turns commit; every failure is a tool result or a warning, never a crash
line; the agent is never put in a dead or critical state and ``status`` shows the stored balance; SIGTERM exits 0
and ``integrity_check`` is ok. (The breaker opening and closing, on a test clock, is in ``test_conway_down.py``.)
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time

import orjson

from conftest import CREATOR, keep_offline, program
from faults.support import SCRIPTED, integrity
from standins.conway_api import ConwayApi
from standins.model_servers import OpenAIServer, openai_answer

CLOSED = "http://127.0.0.1:9"
FRIEND = "0x" + "f2" * 20


def reach_out(body):
    return openai_answer("checking on things", [
        ("call_0", "check_credits", "{}"),
        ("call_1", "send_message", json.dumps({"to_address": FRIEND, "content": "still here"})),
        ("call_2", "write_file", json.dumps({"path": "log.md", "content": "ok\n"}))])


def turns(db_path) -> int:
    con = sqlite3.connect(db_path, timeout=30)
    try:
        return int(con.execute("SELECT COUNT(*) FROM turns").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


def run_until(db_path, at_least: int, out, timeout_s: float = 40) -> subprocess.Popen:
    """Start ``run``, wait for ``at_least`` committed turns in all, stop it with SIGTERM (exit 0 asserted)."""
    proc = subprocess.Popen([*program(), "run"], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None and turns(db_path) < at_least:
            time.sleep(0.1)
        assert proc.poll() is None and turns(db_path) >= at_least, open(out.name).read()[-3000:]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, open(out.name).read()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc


def test_the_running_agent_carries_on_with_every_remote_service_down(cli, home, tmp_path) -> None:
    with OpenAIServer(mode="llamacpp") as model, ConwayApi(balance_cents=1234) as conway:
        model.script(*[reach_out] * 300)
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Keep in touch.", "--creator-address", CREATOR,
                    "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
        assert setup.code == 0, setup.stderr
        stored = orjson.loads(home.config_path.read_bytes())
        keep_offline(home, conwayApiUrl=conway.url, conwayApiKey=conway.api_key, socialRelayUrl=CLOSED,
                     modelStrategy={**stored.get("modelStrategy", {}), **SCRIPTED})
        db_path = home.root / "state.db"
        with open(tmp_path / "first.out", "w+") as out:
            run_until(db_path, 1, out)
        assert conway.requests_to("/v1/credits/balance")  # the balance was read and stored while the API was up

        conway.fail("/v1/credits/balance", 503)
        before = turns(db_path)
        with open(tmp_path / "down.out", "w+") as out:
            run_until(db_path, before + 2, out, timeout_s=60)
        status = json.loads(cli("status", "--json").stdout)

    lines = [json.loads(line) for line in (tmp_path / "down.out").read_text().splitlines() if line.startswith("{")]
    assert not [line for line in lines if line["level"] in ("error", "critical") or "exc" in line]
    results = {name: (result, error) for name, result, error in sqlite3.connect(db_path).execute(
        "SELECT name, result, error FROM tool_calls WHERE turn_id IN (SELECT id FROM turns ORDER BY timestamp DESC"
        " LIMIT 2)")}
    assert "message not sent" in (results["send_message"][1] or ""), results["send_message"]
    assert results["write_file"][1] is None  # the agent still acts on what does not need the network
    assert status["state"] not in ("dead", "critical") and status["tier"] not in ("dead", "critical")
    assert status["creditsCents"] == 1234  # the stored balance, not a false zero
    assert integrity(db_path) == "ok"

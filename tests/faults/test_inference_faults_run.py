"""The same inference faults against the real ``automaton-min run`` process: ``FaultProxy`` in front of the
scripted llama.cpp stand-in answers, in order, four 500s (``Retry-After: 0``, so the retries cost no waiting),
a 200 whose body is cut JSON, a body cut short on the wire (retried after a real backoff of about a second) whose
retry meets a 10 MB body that is not JSON, then forwards to the server, which keeps the agent busy.

The process is ``conftest.program()``: the source tree, or the one-file binary when ``AUTOMATON_BINARY`` is set.
Asserted: the process neither exits nor logs a crash (each fault is a ``turn failed`` warning); ``status`` shows
the last error; turns commit once the server answers; SIGTERM exits 0 and ``integrity_check`` is ok.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

from conftest import CREATOR, keep_offline, program
from crash.harness import busy_answer
from faults.proxy import FaultProxy, Huge, Status, Truncated
from faults.support import integrity
from standins.model_servers import OpenAIServer

RETRY_NOW = {"Content-Type": "application/json", "Retry-After": "0"}


def test_the_running_agent_rides_out_inference_faults(cli, home, tmp_path) -> None:
    with OpenAIServer(mode="llamacpp") as server, FaultProxy(server.url, only="/v1/chat/completions") as proxy:
        server.script(*[busy_answer()] * 500)
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Keep notes.", "--creator-address", CREATOR,
                    "--openai-base-url", proxy.url, "--inference-model", "scripted-model", "--yes")
        assert setup.code == 0, setup.stderr
        keep_offline(home)
        proxy.inject(*[Status(500, headers=RETRY_NOW)] * 4,
                     Status(200, b'{"choices": [{"message": {"role": "assis'),
                     Truncated(declared=4000, sent=50),
                     Huge(10 * 1024 * 1024))
        faults = len(proxy.faults)
        out = open(tmp_path / "run.out", "w+")
        proc = subprocess.Popen([*program(), "run"], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        db_path = home.root / "state.db"
        try:
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and proc.poll() is None:
                if not proxy.faults and len(server.requests) >= 3:
                    break
                time.sleep(0.1)
            assert proc.poll() is None, (tmp_path / "run.out").read_text()[-3000:]
            assert not proxy.faults and len(server.requests) >= 3, (tmp_path / "run.out").read_text()[-3000:]
            status = json.loads(cli("status", "--json").stdout)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            out.close()

    lines = [json.loads(line) for line in (tmp_path / "run.out").read_text().splitlines() if line.startswith("{")]
    failed = [line for line in lines if line["msg"] == "turn failed"]
    # the 500s, the cut JSON, and the body cut short whose retry met the 10 MB body: one failed turn each
    assert len(failed) == 3, [line["error"] for line in failed]
    assert not [line for line in lines if line["level"] in ("error", "critical") or "exc" in line]
    assert status["lastError"] and "inference error" in json.dumps(status["lastError"])
    assert proxy.seen >= faults + 3
    assert integrity(db_path) == "ok"

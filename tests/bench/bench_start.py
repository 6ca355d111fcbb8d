"""Start-up and memory from the one-file binary: `status`, start -> first model request, and the proportional set
size (PSS, ``/proc/PID/smaps_rollup``) of all the agent's processes asleep: before its first signature, after one,
and after 1,000 turns.

``BENCH_BINARY`` names the program (default ``dist/automaton-min``; ``source`` runs ``python -m automaton_min``);
``BENCH_TURNS`` the long run's turns (default 1000). The agent talks to loopback stand-ins only: a model that
answers ``sleep``, ``send_message`` (the signature: the relay stand-in checks it) or, in turn, a quick ``exec`` or
``write_file``, a social relay,
and a closed port for the RPC node. The window is 16,384 tokens, so the long run's context fills up and the exact
token counter is used. Prints medians; asserts nothing about time.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))  # tests/: the stand-ins

import orjson  # noqa: E402

from standins.model_servers import OpenAIServer, openai_answer  # noqa: E402
from standins.social_relay import SocialRelay  # noqa: E402

CREATOR = "0x1234567890AbcdEF1234567890aBcdef12345678"
STATUS_RUNS = 15
STARTS = 5
TURNS = int(os.environ.get("BENCH_TURNS", "1000"))


class Model:
    """Answers by mode: ``sleep``; ``sign`` (one ``send_message``, then sleep); ``turns`` (``exec`` and
    ``write_file`` until ``left`` runs out, then sleep). A request without tools (a summary) gets text. Notes when
    each request arrived."""

    def __init__(self) -> None:
        self.mode, self.left, self.arrivals = "sleep", 0, []
        self.arrived = threading.Condition()

    def __call__(self, body: dict) -> dict:
        with self.arrived:
            self.arrivals.append(time.monotonic())
            self.arrived.notify_all()
            if not body.get("tools"):
                return openai_answer("Earlier turns: quick commands, nothing else.")
            if self.mode == "sign":
                self.mode = "sleep"
                return openai_answer("", [("call_0", "send_message", json.dumps({"to_address": CREATOR,
                                                                                 "content": "hello"}))])
            if self.mode == "turns" and self.left > 0:  # two tools in turn: the loop puts a repeater to sleep
                self.left -= 1
                call = ("exec", {"command": f"echo {self.left}"}) if self.left % 2 else \
                    ("write_file", {"path": "note.txt", "content": f"{self.left}\n"})
                return openai_answer("", [("call_0", call[0], json.dumps(call[1]))])
        return openai_answer("Resting.", [("call_0", "sleep", json.dumps({"duration_seconds": 86_400,
                                                                          "reason": "bench"}))])

    def wait_for(self, count: int, timeout_s: float = 60) -> float:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.arrivals) >= count, timeout_s), "no request came"
            return self.arrivals[count - 1]


class Run:
    """``run`` as a process whose output lines are read as they come."""

    def __init__(self, cli: list[str], env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.proc = subprocess.Popen([*cli, "run"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()

    def wait_for(self, needle: str, count: int, timeout_s: float = 600) -> None:
        with self.cond:
            found = self.cond.wait_for(lambda: sum(needle in line for line in self.lines) >= count, timeout_s)
        assert found, f"never saw {needle!r} x{count}:\n" + "".join(self.lines[-20:])

    def asleep(self, count: int) -> None:
        self.wait_for('"msg":"asleep"', count)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def tree(pid: int) -> list[int]:
    """``pid`` and every descendant (a one-file binary: bootloader, its Python child, the confined spawner)."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += tree(int(child))
    return found


def pss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise ValueError(f"no Pss for {pid}")


def memory(run: Run) -> str:
    each = [(pid, pss_kb(pid)) for pid in tree(run.proc.pid)]
    parts = ", ".join(f"{kb / 1024:.1f}" for _, kb in each)
    return f"{sum(kb for _, kb in each) / 1024:.1f} MB ({len(each)} processes: {parts})"


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    return f"{os.cpu_count()} x {cpu}, {os.uname().machine}, Linux {os.uname().release}"


def main() -> int:
    binary = os.environ.get("BENCH_BINARY", str(ROOT / "dist" / "automaton-min"))
    cli = [sys.executable, "-m", "automaton_min"] if binary == "source" else [str(Path(binary).resolve())]
    if binary != "source" and not Path(binary).is_file():
        print(f"skipped: no binary at {binary} (bash build/build.sh makes it; BENCH_BINARY=source runs the source)")
        return 0
    with tempfile.TemporaryDirectory() as scratch, OpenAIServer(mode="llamacpp") as server, \
            SocialRelay(now=lambda: int(time.time() * 1000)) as relay:
        home = Path(scratch) / "home"
        env = {**os.environ, "AUTOMATON_HOME": str(home)}
        model = Model()
        server.script(*[model] * (TURNS * 4 + 1000))  # the turns, and the summaries of the older ones

        def call(*args: str) -> float:
            started = time.monotonic()
            subprocess.run([*cli, *args], env=env, check=True, capture_output=True)
            return time.monotonic() - started

        call("setup", "--name", "bench", "--genesis-prompt", "Rest.", "--creator-address", CREATOR,
             "--openai-base-url", server.url, "--inference-model", "bench-model", "--yes")
        config = orjson.loads((home / "automaton.json").read_bytes())
        config.update(rpcUrl="http://127.0.0.1:9", socialRelayUrl=relay.url, maxTurnsPerCycle=TURNS + 10,
                      modelStrategy={**config["modelStrategy"], "contextWindow": 16_384})
        (home / "automaton.json").write_bytes(orjson.dumps(config))
        call("heartbeat", "disable", "check_social_inbox")  # the relay is polled with a signature: not here
        status = [call("status", "--json") for _ in range(STATUS_RUNS)]

        first = []
        for _ in range(STARTS):
            launched, before = time.monotonic(), len(model.arrivals)
            run = Run(cli, env)
            first.append(model.wait_for(before + 1) - launched)
            run.asleep(1)
            if len(first) < STARTS:
                run.stop()
        try:
            asleep = memory(run)
            model.mode = "sign"
            call("wake", "sign")
            run.asleep(2)
            assert len(relay.log) == 1, "the message was not sent"
            signed = memory(run)
            model.mode, model.left = "turns", TURNS
            started = time.monotonic()
            call("wake", "turns")
            run.asleep(3)
            took = time.monotonic() - started
            assert model.left == 0, f"{model.left} turns were not taken:\n" + "".join(run.lines[-30:])
            long_run = memory(run)
            exact = any("exact token counter loaded" in line for line in run.lines)
        finally:
            run.stop()

    print(f"machine: {machine()}")
    print(f"program: {' '.join(cli)}")
    print(f"`status --json`: median {statistics.median(status) * 1000:.0f} ms of {STATUS_RUNS}, "
          f"min {min(status) * 1000:.0f} ms")
    print(f"start -> first model request: median {statistics.median(first) * 1000:.0f} ms of {STARTS}, "
          f"min {min(first) * 1000:.0f} ms")
    print(f"PSS asleep, before the first signature: {asleep}")
    print(f"PSS asleep, after one signature: {signed}")
    print(f"PSS asleep, after {TURNS} more turns ({took:.0f} s, {len(model.arrivals)} model requests in all; "
          f"exact token counter loaded: {exact}): {long_run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

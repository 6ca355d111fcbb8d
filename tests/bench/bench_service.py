"""The service at rest and woken: wake latency, idle CPU and bytes written while asleep.

Runs ``automaton-min run`` (with its heartbeat, confined spawner and all) against a loopback model that always
answers "sleep", then:
- wake latency, stored -> turn started: a wake event (an inbox message and its event, as the relay poller stores
  them) is written into state.db and the daemon nudged with SIGUSR1, as ``automaton-min wake`` does; the clock
  stops when the model server receives the wake-up turn's request;
- the same through the real ``automaton-min wake`` command (its own start-up included);
- idle: CPU seconds (utime+stime of the daemon and its spawner) and bytes written (``/proc/PID/io``
  ``write_bytes``) over ``IDLE_S`` seconds asleep (default 300; ``BENCH_IDLE_S`` to change), per hour;
- start-up: from starting the process to the model receiving the first request;
- memory: resident set of the daemon and of its spawner while asleep after turns, and the daemon's peak.

``BENCH_BINARY=dist/automaton-min`` runs the one-file binary instead of ``python -m automaton_min``.

Prints medians and ratios; asserts nothing about time.
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
sys.path.insert(0, str(HERE.parent))  # tests/: the stand-ins

import orjson  # noqa: E402

from automaton_min.clock import system_now  # noqa: E402
from automaton_min.store.wake import post_wake  # noqa: E402
from automaton_min.store import inbox  # noqa: E402
from automaton_min.store.db import open_database  # noqa: E402
from standins.model_servers import OpenAIServer, openai_answer  # noqa: E402

WAKES = 15
IDLE_S = float(os.environ.get("BENCH_IDLE_S", "300"))
CREATOR = "0x1234567890AbcdEF1234567890aBcdef12345678"


class Responder:
    """Answers every request with a sleep, noting when each arrived."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []
        self.arrived = threading.Condition()

    def __call__(self, body) -> dict:
        with self.arrived:
            self.arrivals.append(time.monotonic())
            self.arrived.notify_all()
        return openai_answer("Resting.", [("call_0", "sleep", json.dumps({"duration_seconds": 86_400, "reason": "bench"}))])

    def wait_for(self, count: int, timeout_s: float = 30) -> float:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.arrivals) >= count, timeout_s), "the agent did not wake"
            return self.arrivals[count - 1]


def cpu_and_writes(pids: list[int]) -> tuple[float, int]:
    ticks, written = 0, 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
        io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
        written += int(io["write_bytes"])
    return ticks / os.sysconf("SC_CLK_TCK"), written


def children_of(pid: int) -> list[int]:
    """Every descendant (a one-file binary's Python child and its spawner are a child and a grandchild)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (int(c) for c in (task / "children").read_text().split()):
            found += [child, *children_of(child)]
    return found


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) of a process, in kB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch, OpenAIServer(mode="llamacpp") as model:
        home = Path(scratch) / "home"
        env = {**os.environ, "AUTOMATON_HOME": str(home)}
        responder = Responder()
        model.script(*[responder] * (WAKES * 2 + 5))
        binary = os.environ.get("BENCH_BINARY")
        cli = [str(Path(binary).resolve())] if binary else [sys.executable, "-m", "automaton_min"]
        subprocess.run([*cli, "setup", "--name", "bench", "--genesis-prompt", "Rest.", "--creator-address", CREATOR,
                        "--openai-base-url", model.url, "--inference-model", "bench-model", "--yes"],
                       env=env, check=True, capture_output=True)
        config = orjson.loads((home / "automaton.json").read_bytes())
        (home / "automaton.json").write_bytes(orjson.dumps({**config, "rpcUrl": "http://127.0.0.1:9",
                                                             "socialRelayUrl": ""}))
        launched = time.monotonic()
        daemon = subprocess.Popen([*cli, "run"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            first_request_ms = (responder.wait_for(1, 60) - launched) * 1000
            time.sleep(2)  # let the start-up heartbeat pass finish before measuring (a benchmark may wait)
            stored = []
            for i in range(WAKES):
                with open_database(home / "state.db") as db:
                    inbox.insert_message(db, f"bench-{i}", CREATOR, f"message {i}", received_at_ms=system_now())
                    post_wake(db, "social", f"1 new message ({i})", now_ms=system_now())
                started = time.monotonic()
                os.kill(daemon.pid, signal.SIGUSR1)
                stored.append((responder.wait_for(len(responder.arrivals) + 1) - started) * 1000)
                time.sleep(0.5)  # the message turn and the sleep after it
            via_cli = []
            for i in range(5):
                before = len(responder.arrivals)
                started = time.monotonic()
                subprocess.run([*cli, "wake", f"bench {i}"], env=env, check=True, capture_output=True)
                via_cli.append((responder.wait_for(before + 1) - started) * 1000)
                time.sleep(0.5)

            time.sleep(10)  # the last wake's turn is written and the agent asleep before the idle window opens
            pids = [daemon.pid, *children_of(daemon.pid)]
            cpu_before, written_before = cpu_and_writes(pids)
            time.sleep(IDLE_S)
            cpu_after, written_after = cpu_and_writes(pids)
            asleep = {pid: memory_kb(pid) for pid in pids}
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)

    cpu_s, written = cpu_after - cpu_before, written_after - written_before
    print(f"running: {' '.join(Path(c).name for c in cli)}")
    print(f"start -> first model request: {first_request_ms:.0f} ms (one run; the start-up steps, the wizard skipped)")
    rss = "; ".join(f"pid {pid}: {m['VmRSS'] / 1024:.1f} MB now, {m['VmHWM'] / 1024:.1f} MB peak" for pid, m in asleep.items())
    print(f"resident memory asleep after {WAKES + 6} turns: {rss} (the first pid is the daemon; a one-file binary's"
          " bootloader parent is small, its Python child is the daemon)")
    print(f"wake latency, stored -> turn started: median {statistics.median(stored):.1f} ms, "
          f"max {max(stored):.1f} ms ({WAKES} wakes)")
    print(f"wake latency, `automaton-min wake` -> turn started: median {statistics.median(via_cli):.1f} ms "
          f"(includes the command's own start-up)")
    print(f"idle for {IDLE_S:.0f} s: {cpu_s:.2f} CPU s ({100 * cpu_s / IDLE_S:.3f}% of one core), "
          f"{written} bytes written -> {written * 3600 / IDLE_S / 1e6:.3f} MB per idle hour "
          f"(daemon and spawner, pids {pids})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

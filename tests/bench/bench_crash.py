"""Crash consistency, long run: SIGKILL ``automaton-min run`` BENCH_KILLS times (default 200), restart it, check.

Mostly at random moments (a seeded RNG: SIGKILL after 0.5-3 s of running, turns and inbox messages under way);
every 10th kill at a chosen crash point (``AUTOMATON_CRASH_AT``: before/after the turn commit, inside a heartbeat
task); every 25 kills a clean restart that must commit turns and stop with SIGTERM -> 0. The invariants are those
of ``tests/crash/harness.py`` (integrity_check, inbox exactly once or back, turns with their tool calls, payment
nonces unique, leases recover), checked after every kill.

Prints kills done, invariant failures (must be 0), inbox outcomes and time; exits 1 on any failure.
``BENCH_SEED`` changes the seed; ``AUTOMATON_BINARY=dist/automaton-min`` runs it against the one-file binary.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: the stand-ins and the harness

import orjson  # noqa: E402

from conftest import program  # noqa: E402
from crash.harness import Harness, busy_answer  # noqa: E402
from standins.model_servers import OpenAIServer  # noqa: E402

KILLS = int(os.environ.get("BENCH_KILLS", "200"))
SEED = int(os.environ.get("BENCH_SEED", "2026"))
CREATOR = "0x" + "c0" * 20
POINTS = ("before_turn_commit", "turn_committed", "turn_committed:2", "before_turn_commit:3", "heartbeat_task")


def main() -> int:
    import subprocess

    started = time.monotonic()
    rng = random.Random(SEED)
    with tempfile.TemporaryDirectory() as scratch, OpenAIServer(mode="llamacpp") as model:
        home = Path(scratch) / "home"
        env = {**os.environ, "AUTOMATON_HOME": str(home)}
        env.pop("AUTOMATON_CRASH_AT", None)
        model.script(*[busy_answer()] * (KILLS * 40 + 200))
        subprocess.run([*program(), "setup", "--name", "bench", "--genesis-prompt", "Keep notes.",
                        "--creator-address", CREATOR, "--openai-base-url", model.url, "--inference-model", "bench-model",
                        "--yes"], env=env, check=True, capture_output=True)
        config = orjson.loads((home / "automaton.json").read_bytes())
        (home / "automaton.json").write_bytes(orjson.dumps({**config, "rpcUrl": "http://127.0.0.1:9", "socialRelayUrl": ""}))
        harness = Harness(home)
        harness.clean_run(turns=1)
        attempts = 0
        while harness.kills < KILLS and attempts < KILLS * 2:
            attempts += 1
            harness.add_messages(rng.randint(0, 3))
            if attempts % 10 == 0:
                point = POINTS[(attempts // 10) % len(POINTS)]
                if point == "heartbeat_task":
                    harness.crash_in_heartbeat(rng.choice(("heartbeat_ping", "retention", "health_check")))
                else:
                    harness.crash_at(point)
            else:
                harness.kill_after(rng.uniform(0.5, 3.0))
            if attempts % 25 == 0:
                harness.clean_run(turns=2)
            if harness.kills and harness.kills % 20 == 0 and attempts % 10 == 0:
                print(f"  {harness.kills} kills, {len(harness.failures)} failures, {time.monotonic() - started:.0f} s",
                      flush=True)
        harness.add_messages(2)
        harness.clean_run(turns=3)
        outcome = dict(harness.rows("SELECT status, COUNT(*) FROM inbox_messages GROUP BY status"))
        turns = harness.count("SELECT COUNT(*) FROM turns")
        crashed = harness.rows("SELECT COUNT(*), COALESCE(MAX(crash_count), 0) FROM inbox_messages WHERE crash_count > 0")[0]
    elapsed = time.monotonic() - started
    print(f"program: {' '.join(program())}")
    print(f"kills: {harness.kills} ({len(harness.points)} at crash points, {harness.kills - len(harness.points)} at random"
          f" moments; seed {SEED})")
    print(f"invariant failures: {len(harness.failures)}")
    for failure in harness.failures[:20]:
        print(f"  {failure}")
    print(f"turns committed: {turns}; inbox messages: {len(harness.messages)} {outcome}; "
          f"heartbeat leases recovered: {harness.leases_recovered}; messages in flight at a kill: {crashed[0]}"
          f" (at most {crashed[1]} kills each, none counted as a try)")
    print(f"time: {elapsed:.1f} s ({elapsed / max(harness.kills, 1):.2f} s per kill)")
    return 1 if harness.failures or harness.kills < KILLS else 0


if __name__ == "__main__":
    sys.exit(main())

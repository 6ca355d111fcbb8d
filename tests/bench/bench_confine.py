"""What confinement costs: a short command through the confined spawner against the same command run directly.

Prints the spawner's start-up time (once per run of the agent), the median of ``exec("true")`` and of a
``read_file`` both ways, and the ratios; then, confined only, a command that leaves ten setsid'd processes behind
(ended with the call: what the end-of-call sweep costs).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from automaton_min.confine.client import ConfinedSandbox, ConfinementUnavailable
from automaton_min.confine.landlock import abi_version
from automaton_min.conway.local import LocalSandbox

RUNS = 50


def median_ms(action, runs: int = RUNS) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "home"
        (home / "workspace").mkdir(parents=True)
        (home / "workspace" / "note.txt").write_text("hello\n" * 100)
        direct = LocalSandbox(home / "workspace")
        started = time.perf_counter()
        try:
            confined = ConfinedSandbox(home, home / "workspace", "landlock" if abi_version() else "namespace").start()
        except ConfinementUnavailable as exc:
            print(f"no confinement on this machine: {exc}")
            return 0
        start_ms = (time.perf_counter() - started) * 1000
        try:
            print(f"confinement: {confined.describe()}")
            print(f"spawner start (once per run): {start_ms:.1f} ms")
            for name, action_direct, action_confined in [
                ('exec("true")', lambda: direct.exec("true"), lambda: confined.exec("true")),
                ("read_file (600 B)", lambda: direct.read_file("note.txt"), lambda: confined.read_file("note.txt")),
            ]:
                plain, boxed = median_ms(action_direct), median_ms(action_confined)
                print(f"{name:18s} direct {plain:7.2f} ms   confined {boxed:7.2f} ms   ratio {boxed / plain:5.2f}x")
            leaving = "for i in 1 2 3 4 5 6 7 8 9 10; do setsid sleep 60 > /dev/null 2>&1 & done"
            print(f"exec leaving 10 setsid'd processes, all ended with the call: "
                  f"{median_ms(lambda: confined.exec(leaving), runs=10):.1f} ms")
        finally:
            confined.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``automaton-min status`` on an empty database and on one with 100,000 turns.

Prints medians of whole-process runs (what a user waits for) and of the in-process
``gather_status`` call, and the ratio between the two database sizes.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from automaton_min.clock import to_iso
from automaton_min.config import load_config
from automaton_min.home import Home
from automaton_min.ids import new_ulid
from automaton_min.runtime.genesis import SetupAnswers, setup_agent
from automaton_min.runtime.status import gather_status
from automaton_min.store.db import open_database

TURNS = 100_000
RUNS = 15
START_MS = 1_795_000_000_000


def fill_turns(home: Home, count: int) -> None:
    tool_calls = orjson.dumps([{"id": "call_1", "name": "exec", "arguments": {"command": "ls -la"}, "result": "x" * 200}]).decode()
    with open_database(home.default_db_path) as db, db.transaction():
        rows = (
            (new_ulid(START_MS + i * 1000), to_iso(START_MS + i * 1000), "running", "wakeup " * 20, "wakeup",
             "I should check my balance and then write the next file. " * 8, tool_calls, '{"prompt_tokens":1200}', 3)
            for i in range(count)
        )
        db.connection.executemany(
            "INSERT INTO turns (id, timestamp, state, input, input_source, thinking, tool_calls, token_usage, cost_cents)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def time_cli(home: Home, *args: str) -> float:
    env = {**os.environ, "AUTOMATON_HOME": str(home.root)}
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "automaton_min", *args], env=env, check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return median_ms(samples)


def peak_rss_mb(home: Home, *args: str) -> float:
    """Peak resident memory of one CLI run, measured in a fresh child so earlier runs do not count."""
    code = (
        "import resource, subprocess, sys;"
        "subprocess.run([sys.executable, '-m', 'automaton_min', *sys.argv[1:]], check=True, capture_output=True);"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    env = {**os.environ, "AUTOMATON_HOME": str(home.root)}
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, check=True, capture_output=True, text=True)
    return int(out.stdout) / 1024


def time_in_process(home: Home) -> float:
    config = load_config(home)
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        gather_status(home, config)
        samples.append(time.perf_counter() - start)
    return median_ms(samples)


def main() -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpu, Python {platform.python_version()}, {platform.system()} {platform.release()}")
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(Path(tmp) / "home")
        os.environ["AUTOMATON_HOME"] = str(home.root)
        setup_agent(home, SetupAnswers("bench", "Benchmark the status command.", "0x" + "12" * 20))

        version_ms = time_cli(home, "--version")
        empty_cli = time_cli(home, "status", "--json")
        empty_call = time_in_process(home)

        start = time.perf_counter()
        fill_turns(home, TURNS)
        fill_s = time.perf_counter() - start
        size_mb = home.default_db_path.stat().st_size / 1e6

        full_cli = time_cli(home, "status", "--json")
        full_call = time_in_process(home)
        rss_status = peak_rss_mb(home, "status", "--json")
        rss_version = peak_rss_mb(home, "--version")

    print(f"insert {TURNS} turns: {fill_s:.2f} s, state.db {size_mb:.1f} MB")
    print(f"automaton-min --version          median {version_ms:7.1f} ms  ({RUNS} runs)")
    print(f"status --json, 0 turns           median {empty_cli:7.1f} ms")
    print(f"status --json, {TURNS} turns     median {full_cli:7.1f} ms  ratio {full_cli / empty_cli:.2f}x")
    print(f"gather_status(), 0 turns         median {empty_call:7.2f} ms")
    print(f"gather_status(), {TURNS} turns   median {full_call:7.2f} ms  ratio {full_call / empty_call:.2f}x")
    print(f"peak RSS: --version {rss_version:.1f} MB, status --json ({TURNS} turns) {rss_status:.1f} MB")


if __name__ == "__main__":
    main()

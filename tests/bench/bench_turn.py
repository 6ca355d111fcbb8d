"""Per-turn overhead: what the runtime spends on a turn besides the model's and the tools' own time.

The real agent (``build_agent``) against a loopback model that answers at once with text only, so a wake cycle is
one turn: the finances, the survival tier, the context (turns, memories, summary), the request over loopback, the
turn's transaction, memory ingestion and the loop's controls. Measured on a home with 1,000 turns and with 100,000
turns (and 20,000 episodes); medians of ``RUNS`` cycles, the ratio between them. Prints; asserts nothing.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: the stand-ins
sys.path.insert(0, str(HERE))

import orjson  # noqa: E402

from automaton_min.config import load_config  # noqa: E402
from automaton_min.home import Home  # noqa: E402
from automaton_min.runtime.agent_runtime import build_agent  # noqa: E402
from automaton_min.runtime.genesis import SetupAnswers, setup_agent  # noqa: E402
from automaton_min.store.db import open_database  # noqa: E402
from bench_context import fill  # noqa: E402
from standins.model_servers import OpenAIServer, openai_answer  # noqa: E402

RUNS = 60


def per_turn_ms(turns: int, memories: int) -> float:
    with tempfile.TemporaryDirectory() as tmp, OpenAIServer(mode="llamacpp") as model:
        home = Home(Path(tmp) / "home")
        setup_agent(home, SetupAnswers("bench", "Measure turns.", "0x" + "12" * 20))
        config = orjson.loads(home.config_path.read_bytes())
        home.config_path.write_bytes(orjson.dumps({**config, "openaiBaseUrl": model.url, "inferenceModel": "bench-model",
                                                   "rpcUrl": "http://127.0.0.1:9", "socialRelayUrl": ""}))
        fill(home.default_db_path, turns, memories)
        model.script(*[openai_answer("Nothing to do; resting.")] * (RUNS + 5))
        agent = build_agent(home, load_config(home, {}))
        try:
            agent.loop.run_cycle("warm-up")
            samples = []
            for n in range(RUNS):
                started = time.perf_counter()
                agent.loop.run_cycle(f"bench {n}")
                samples.append(time.perf_counter() - started)
        finally:
            agent.sandbox.close()
            agent.db.close()
        with open_database(home.default_db_path) as db:
            assert db.scalar("SELECT COUNT(*) FROM turns") >= turns + RUNS
    return statistics.median(samples) * 1000


def main() -> None:
    os.environ.setdefault("AUTOMATON_LOG_LEVEL", "error")
    small = per_turn_ms(1_000, 1_000)
    big = per_turn_ms(100_000, 20_000)
    print(f"one turn besides the model and tools (loopback model answering at once), median of {RUNS}:")
    print(f"  1,000 turns in state.db:    {small:7.1f} ms")
    print(f"  100,000 turns in state.db:  {big:7.1f} ms   ratio {big / small:.2f}x")


if __name__ == "__main__":
    main()

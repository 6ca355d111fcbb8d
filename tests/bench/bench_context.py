"""Context assembly per turn, on a database with 1,000 turns and 1,000 memories against one with 100,000 turns and
50,000 memories; and the RSS of a process that assembled a context, with and without the exact tokenizer loaded.

What one turn costs the runtime before the model is called: read the unfolded turns, the goals and the summary,
retrieve memories (five FTS5 searches, ranked), size everything and assemble the messages. The context is roomy
(a 128k window), so sizes are estimated and the encoder is not loaded; the RSS figures show what loading it costs.
"""

from __future__ import annotations

import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from automaton_min.agent.turn_context import TurnContextBuilder
from automaton_min.clock import to_iso
from automaton_min.ids import new_ulid
from automaton_min.inference.registry import ModelInfo
from automaton_min.inference.router import Route
from automaton_min.inference.types import Message, ToolSchema
from automaton_min.memory.compression import FOLD_MARKER_KEY, HistoryFolder
from automaton_min.memory.retrieval import MemoryRetriever
from automaton_min.store.db import open_database
from automaton_min.store.kv import set_value

START_MS = 1_795_000_000_000
RUNS = 200
UNFOLDED = 30  # turns after the fold marker: the steady state of a long-lived agent
CORPUS = [e["text"] for e in json.loads((Path(__file__).resolve().parents[1] / "data" / "token_corpus.json").read_text())]
WORDS = sorted({w.lower() for text in CORPUS for w in re.findall(r"[A-Za-z]{4,12}", text)})
ROUTE = Route(ModelInfo("bench-model", "openai-compatible", "bench", context_window=128_000), 4096, 100_000, "normal",
              "agent_turn")
SYSTEM = "You are an automaton. " + CORPUS[0][:6000]
TOOLS = tuple(ToolSchema(f"tool_{n}", "Does a thing. " * 5, {"type": "object", "properties": {"x": {"type": "string"}}})
              for n in range(30))


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def fill(path: Path, turns: int, memories: int) -> None:
    rng = random.Random(turns)
    calls = orjson.dumps([{"id": "c1", "name": "exec", "arguments": {"command": "ls -la"}, "result": "x " * 300}]).decode()
    share = {"episodic": 0.6, "semantic": 0.3, "procedural": 0.04, "relationship": 0.06}
    with open_database(path) as db, db.transaction():
        ids = [new_ulid(START_MS + i * 1000) for i in range(turns)]
        db.connection.executemany(
            "INSERT INTO turns (id, timestamp, state, input, input_source, thinking, tool_calls, token_usage, cost_cents)"
            " VALUES (?, ?, 'running', ?, 'inbox', ?, ?, '{}', 1)",
            ((ids[i], to_iso(START_MS + i * 1000), sentence(rng, 30), sentence(rng, 60), calls) for i in range(turns)))
        marked = turns - UNFOLDED - 1
        set_value(db, FOLD_MARKER_KEY, orjson.dumps({"timestamp": to_iso(START_MS + marked * 1000), "id": ids[marked]}).decode(),
                  START_MS)
        stamp = lambda i: to_iso(START_MS + (i % turns) * 1000)  # noqa: E731
        db.connection.executemany(
            "INSERT INTO episodic_memory (id, session_id, event_type, summary, importance, classification, created_at)"
            " VALUES (?, 'agent', 'tool:exec', ?, ?, 'productive', ?)",
            ((new_ulid(START_MS + i), sentence(rng, 25), rng.random(), stamp(i)) for i in range(int(memories * share["episodic"]))))
        db.connection.executemany(
            "INSERT INTO semantic_memory (id, category, key, value, confidence, source, created_at, updated_at)"
            " VALUES (?, 'domain', ?, ?, ?, 'agent', ?, ?)",
            ((new_ulid(START_MS + i), f"k{i}", sentence(rng, 15), rng.random(), stamp(i), stamp(i))
             for i in range(int(memories * share["semantic"]))))
        db.connection.executemany(
            "INSERT INTO procedural_memory (id, name, description, steps, created_at, updated_at) VALUES (?, ?, ?, '[]', ?, ?)",
            ((new_ulid(START_MS + i), f"p{i}", sentence(rng, 10), stamp(i), stamp(i))
             for i in range(int(memories * share["procedural"]))))
        db.connection.executemany(
            "INSERT INTO relationship_memory (id, entity_address, relationship_type, trust_score, notes, created_at, updated_at)"
            " VALUES (?, ?, 'peer', ?, ?, ?, ?)",
            ((new_ulid(START_MS + i), f"0x{i:040x}", rng.random(), sentence(rng, 8), stamp(i), stamp(i))
             for i in range(int(memories * share["relationship"]))))
        db.execute("INSERT INTO session_summaries (id, session_id, summary, created_at) VALUES (?, 'agent', ?, ?)",
                   (new_ulid(START_MS), sentence(rng, 200), to_iso(START_MS)))


def per_turn_ms(path: Path) -> tuple[float, int, int]:
    rng = random.Random(1)
    now = lambda: START_MS + 200_000 * 1000  # noqa: E731
    with open_database(path) as db:
        builder = TurnContextBuilder(db, now, router=None, retriever=MemoryRetriever(db, now),  # type: ignore[arg-type]
                                     folder=HistoryFolder(db, now))
        samples = []
        for _ in range(RUNS):
            pending = Message("user", "[inbox] " + sentence(rng, 25))
            started = time.perf_counter()
            context = builder.build(ROUTE, system=SYSTEM, tools=TOOLS, status="--- STATUS ---", pending=pending,
                                    turn_id="T", tier="normal", allow_fold=False)
            samples.append(time.perf_counter() - started)
        return statistics.median(samples) * 1000, context.utilization.used, len(context.memories.items)


RSS_PROBE = """
import sys
from pathlib import Path
sys.path.insert(0, {bench!r})
import bench_context as b
from automaton_min.memory.tokens import default_counter
b.per_turn_ms(Path({db!r}))
if {exact!r}:
    default_counter().count("load the encoder")
print(next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:")))
"""


def rss_kb(db: Path, exact: bool) -> int:
    code = RSS_PROBE.format(bench=str(Path(__file__).resolve().parent), db=str(db), exact=exact)
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp) / "small.db", Path(tmp) / "big.db"
        fill(small, 1_000, 1_000)
        fill(big, 100_000, 50_000)
        small_ms, small_used, small_items = per_turn_ms(small)
        big_ms, big_used, big_items = per_turn_ms(big)
        print(f"context assembly, median of {RUNS} turns (roomy 128k window, {UNFOLDED} unfolded turns):")
        print(f"  1k turns, 1k memories:     {small_ms:7.2f} ms  ({small_used} tokens, {small_items} memories retrieved)")
        print(f"  100k turns, 50k memories:  {big_ms:7.2f} ms  ({big_used} tokens, {big_items} memories retrieved)")
        print(f"  ratio 100k/1k:             {big_ms / small_ms:7.2f}x")
        without, with_exact = rss_kb(big, False), rss_kb(big, True)
        print("RSS of a process that assembled contexts (VmRSS):")
        print(f"  estimate only:             {without / 1024:7.1f} MB")
        print(f"  exact tokenizer loaded:    {with_exact / 1024:7.1f} MB  (+{(with_exact - without) / 1024:.1f} MB)")


if __name__ == "__main__":
    main()

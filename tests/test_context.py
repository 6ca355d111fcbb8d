"""Turn storage, the context manager's assembly (priority, budget, prefix stability) and the prompts."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automaton_min.agent.context import (RECENT_ALWAYS, ContextAssembler, ContextParts, message_size, size_of,
                                         turn_messages)
from automaton_min.agent.prompts import Identity, Status, creator_note, status_block, system_prompt, wakeup_message
from automaton_min.clock import to_iso
from automaton_min.inference.router import tools_text
from automaton_min.inference.types import Message, ToolSchema
from automaton_min.memory.compression import wake_reference
from automaton_min.memory.retrieval import MemoryBudget, MemoryRetriever
from automaton_min.memory.stores import SemanticMemory
from automaton_min.memory.tokens import TokenCounter, count_tokens, estimate_tokens
from automaton_min.store.wake import WakeEvent
from automaton_min.store.turns import StoredToolCall, StoredTurn, count_turns, insert_turn, prune_turns, recent_turns

IDENTITY = Identity("ada", "0x" + "12" * 20, "0x" + "34" * 20, None)
STATUS = Status("running", "normal", 1234, 5_500_000, 7, 3720, "gpt-5.2")
TOOLS = (ToolSchema("exec", "Run a shell command.", {"type": "object", "properties": {"command": {"type": "string"}}}),)
CORPUS = [entry["text"] for entry in json.loads((Path(__file__).parent / "data" / "token_corpus.json").read_text())]


def turn(n: int, *, thinking: str = "", calls: int = 1, input: str | None = None, result: str | None = None) -> StoredTurn:
    tid = f"T{n:04d}"
    return StoredTurn(tid, to_iso(1_795_000_000_000 + n * 1000), "running", input, "wakeup" if input else None, thinking,
                      tuple(StoredToolCall(f"{tid}_{i}", "exec", {"command": f"echo {n}"},
                                           f"out {n}" if result is None else result, None, 5, "call_0")
                            for i in range(calls)))


def assemble(turns, *, capacity=10_000, pending="[wakeup] hi", retriever=None, counter=None, **more):
    parts = ContextParts(system="SYSTEM", tools=TOOLS, turns=turns, pending=Message("user", pending) if pending else None,
                         status="--- STATUS ---", **more)
    return ContextAssembler(retriever, counter).assemble(parts, capacity=capacity)


def exact_size(context) -> int:
    return sum(message_size(m, count_tokens) for m in context.messages) + count_tokens(tools_text(TOOLS))


def commands(context) -> list[str]:
    return [m.tool_calls[0].arguments["command"] for m in context.messages if m.role == "assistant"]


# --------------------------------------------------------------------------- storage


def test_turns_round_trip_with_unique_call_ids_across_turns(db) -> None:
    with db.transaction():
        insert_turn(db, turn(1, calls=2))
        insert_turn(db, turn(2, calls=2))  # the provider said "call_0" both times; our ids differ
    stored = recent_turns(db, 10)
    assert [t.id for t in stored] == ["T0001", "T0002"]
    assert [c.id for c in stored[1].tool_calls] == ["T0002_0", "T0002_1"]
    assert stored[0].tool_calls[0].provider_id == "call_0" and stored[0].tool_calls[0].arguments == {"command": "echo 1"}
    assert db.scalar("SELECT COUNT(*) FROM tool_calls") == 4


def test_recent_turns_after_a_marker(db) -> None:
    with db.transaction():
        for n in range(6):
            insert_turn(db, turn(n))
    third = recent_turns(db, 10)[2]
    assert [t.id for t in recent_turns(db, 10, after=(third.timestamp, third.id))] == ["T0003", "T0004", "T0005"]
    assert [t.id for t in recent_turns(db, 2, after=(third.timestamp, third.id))] == ["T0004", "T0005"]


def test_turn_retention_keeps_the_newest(db) -> None:
    with db.transaction():
        for n in range(10):
            insert_turn(db, turn(n))
    assert prune_turns(db, keep_latest=3) == 7
    assert [t.id for t in recent_turns(db, 10)] == ["T0007", "T0008", "T0009"] and count_turns(db) == 3
    assert db.scalar("SELECT COUNT(*) FROM tool_calls") == 3


# --------------------------------------------------------------------------- assembly


def test_tool_only_turns_stay_and_the_changing_part_comes_last() -> None:
    context = assemble([turn(1, thinking="")])
    roles = [m.role for m in context.messages]
    assert roles == ["system", "assistant", "tool", "user"]
    assert context.messages[0].content == "SYSTEM"
    assert context.messages[1].tool_calls[0].id == "T0001_0" and context.messages[2].tool_call_id == "T0001_0"
    last = context.messages[-1].content
    assert last.startswith("[runtime]") and "--- STATUS ---" in last and last.endswith("[wakeup] hi")
    assert context.utilization.recommendation == "ok" and context.shown_turns == ("T0001",)


def test_errors_are_shown_as_errors() -> None:
    failed = StoredTurn("T9", to_iso(0), "running", None, None, "", (StoredToolCall("T9_0", "exec", {}, "", "boom"),))
    assert turn_messages(failed)[1].content == "Error: boom"


def test_older_turns_that_do_not_fit_become_compact_references_and_compress_is_recommended() -> None:
    turns = [turn(n, thinking=f"step {n} " + CORPUS[n][:600]) for n in range(12)]
    context = assemble(turns, capacity=1_500)
    kept = commands(context)
    assert kept[-RECENT_ALWAYS:] == ["echo 9", "echo 10", "echo 11"] and "echo 0" not in kept
    last = context.messages[-1].content
    assert "--- EARLIER TURNS (not shown whole) ---" in last and "| type=turn:exec | createdAt=" in last
    assert context.utilization.recommendation == "compress" and context.utilization.compressed_turns > 0
    assert context.utilization.compression_ratio < 0.5
    assert exact_size(context) <= 1_500


def test_the_last_three_turns_stay_with_their_results_cut_to_fit() -> None:
    big = " ".join(CORPUS)[:20_000]
    context = assemble([turn(n, result=big) for n in range(5)], capacity=2_500)
    assert commands(context)[-3:] == ["echo 2", "echo 3", "echo 4"]
    results = [m.content for m in context.messages if m.role == "tool"]
    assert all("[truncated:" in r for r in results) and exact_size(context) <= 2_500
    assert context.utilization.recommendation == "compress"


def test_emergency_keeps_system_goals_last_turn_and_input_only() -> None:
    big = " ".join(CORPUS)[:20_000]
    turns = [turn(n, thinking=big) for n in range(5)]  # each turn alone is larger than the window
    context = assemble(turns, capacity=3_000, goals=["- ship the docs (goal id G1)"], summary="old summary")
    assert context.utilization.recommendation == "emergency"
    assert commands(context) in ([], ["echo 4"])
    assert "old summary" not in "".join(m.content for m in context.messages)
    last = context.messages[-1].content
    assert "ship the docs" in last and last.endswith("[wakeup] hi") and "Context emergency" in last


def test_base64_tool_results_are_sized_by_the_exact_count() -> None:
    blobs = [base64.b64encode(hashlib.shake_256(str(n).encode()).digest(2250)).decode() for n in range(5)]
    turns = [turn(n, result=blobs[n]) for n in range(5)]
    assert sum(len(b) // 4 + 20 for b in blobs) < 8_000  # characters/4 would keep all five turns whole
    context = assemble(turns, capacity=8_000)
    assert exact_size(context) <= 8_000
    assert [m.content for m in context.messages if m.role == "tool"] == blobs[2:]  # three whole, the older two out


def test_a_roomy_context_makes_no_exact_count() -> None:
    counter = TokenCounter()
    context = assemble([turn(n) for n in range(5)], capacity=20_000, counter=counter)
    assert len(commands(context)) == 5 and not counter.loaded and not context.utilization.exact
    assemble([turn(1)], capacity=20_000, counter=counter, summary="S" * 60_000)  # near the capacity: exact
    assert counter.loaded


def test_wake_events_and_summary_are_placed_and_the_summary_is_bounded() -> None:
    events = [wake_reference(WakeEvent(7, "social", "message from 0xabc", {}, "2026-11-22T10:00:00.000Z"), estimate_tokens)]
    context = assemble([turn(1)], events=events, summary="we built a docs site. " * 2000, capacity=8_000)
    assert context.messages[1].content.startswith("[summary of earlier turns]")
    assert count_tokens(context.messages[1].content) <= 8_000 * 0.15 + 10
    assert "id=7 | type=wake:social | createdAt=2026-11-22T10:00:00.000Z | goal=- | task=- | content=message from 0xabc" \
        in context.messages[-1].content


def test_the_prefix_is_stable_as_turns_are_added() -> None:
    turns = [turn(n, thinking=f"thought {n}") for n in range(6)]
    earlier = assemble(turns[:5], pending="[inbox] first", capacity=50_000)
    later = assemble(turns, pending="[inbox] second", capacity=50_000)
    assert later.messages[: len(earlier.messages) - 1] == earlier.messages[:-1]


# --------------------------------------------------------------------------- property: budget and priority

TEXT = st.sampled_from(CORPUS).flatmap(lambda text: st.integers(0, len(text)).map(lambda n: text[:n]))


@st.composite
def turn_lists(draw):
    count = draw(st.integers(0, 12))
    return [StoredTurn(f"T{n:04d}", to_iso(1_795_000_000_000 + n * 1000), "running",
                       draw(st.none() | TEXT), "inbox", draw(TEXT),
                       tuple(StoredToolCall(f"T{n:04d}_{i}", "exec", {"command": f"c{n}"}, draw(TEXT), None, 1, f"c{i}")
                             for i in range(draw(st.integers(0, 3)))))
            for n in range(count)]


def _facts_db(tmp_path_factory):
    from automaton_min.store.db import open_database

    db = open_database(tmp_path_factory.mktemp("facts") / "state.db")
    store = SemanticMemory(db, lambda: 1_795_000_000_000)
    for n, text in enumerate(CORPUS[:60]):
        store.remember("environment", f"note-{n}", text[:400], source="agent")
    return db


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=turn_lists(), capacity=st.integers(600, 12_000), pending=st.none() | TEXT, query=TEXT,
       goals=st.lists(TEXT.map(lambda t: "- " + t[:200]), max_size=3), summary=st.none() | TEXT)
def test_assembly_respects_the_capacity_and_the_priority_order(tmp_path_factory, turns, capacity, pending, query, goals,
                                                               summary):
    db = getattr(test_assembly_respects_the_capacity_and_the_priority_order, "db", None)
    if db is None:
        db = test_assembly_respects_the_capacity_and_the_priority_order.db = _facts_db(tmp_path_factory)
    retriever = MemoryRetriever(db, lambda: 1_795_000_000_000, MemoryBudget())
    parts = ContextParts(system="SYSTEM PROMPT", tools=TOOLS, turns=turns, goals=goals, query=query, status="--- STATUS ---",
                         pending=Message("user", pending) if pending else None, summary=summary or None)
    context = ContextAssembler(retriever).assemble(parts, capacity=capacity)
    util = context.utilization
    floor = message_size(Message("system", "SYSTEM PROMPT"), count_tokens) + count_tokens(tools_text(TOOLS)) + 400
    assert exact_size(context) <= max(capacity, floor)  # never above the capacity unless the bare minimum is
    assert context.messages[0] == Message("system", "SYSTEM PROMPT")
    last = context.messages[-1].content
    assert all(goal in last for goal in goals) and "--- STATUS ---" in last
    shown = list(context.shown_turns)
    ids = [t.id for t in turns]
    assert shown == ids[len(ids) - len(shown):]  # a contiguous run of the newest turns: newest first
    if util.recommendation != "emergency":
        assert shown[-RECENT_ALWAYS:] == ids[-RECENT_ALWAYS:]  # the last three always
        older_shown = [t for t in turns if t.id in shown[:-RECENT_ALWAYS]]
        if summary and any(size_of(turn_messages(t), count_tokens) > 30 for t in older_shown):
            # an older turn got room only after the summary did
            assert context.messages[1].content.startswith("[summary of earlier turns]")
    else:
        assert len(shown) <= 1 and util.memory_tokens == 0  # emergency: the last turn at most, no memories
        assert not any(m.content.startswith("[summary of") for m in context.messages)
    if shown and len(shown) < len(ids):  # an older turn was left out: it was the oldest ones
        assert util.turns_omitted == len(ids) - len(shown)


# --------------------------------------------------------------------------- prompts


def test_system_prompt_is_stable_and_the_status_and_creator_message_travel_separately() -> None:
    cleaned = []
    prompt = system_prompt(IDENTITY, soul="I like building.", genesis="Earn by writing docs.", constitution=None,
                           clean=lambda text: cleaned.append(text) or text)
    for needle in ("Your name is ada.", IDENTITY.address, "CONSTITUTION", "I like building.", "Earn by writing docs.",
                   "local mode"):
        assert needle in prompt, needle
    assert "STATUS" not in prompt and "TOOLS" not in prompt
    assert cleaned == ["I like building.", "Earn by writing docs."]
    block = status_block(STATUS)
    for needle in ("Credits: $12.34", "Wallet: 5.50 USDC", "Survival tier: normal", "Model: gpt-5.2"):
        assert needle in block
    assert "Welcome!" in creator_note("Welcome!", str)


def test_long_soul_is_bounded_and_tighter_in_compact_mode() -> None:
    prompt = system_prompt(IDENTITY, soul="s" * 9000, genesis=None, constitution=None, clean=str)
    assert "[... 4000 characters not shown]" in prompt
    compact = system_prompt(IDENTITY, soul="s" * 9000, genesis="g" * 9000, constitution=None, clean=str, compact=True)
    assert "[... 7800 characters not shown]" in compact and count_tokens(compact) <= 2_000


def test_wakeup_says_why() -> None:
    first = wakeup_message(first_run=True, reason="you were just created", credits_cents=500, usdc_atomic=None, turns=0)
    assert "first turn" in first and "Why you are awake: you were just created." in first and "$5.00" in first
    later = wakeup_message(first_run=False, reason="a message arrived from 0xabc", credits_cents=None, usdc_atomic=1_000_000,
                           turns=12, recent_thoughts=["a", "", "b", "c", "d"])
    assert "after 12 turns" in later and "a message arrived" in later and "Credits: unknown; wallet: 1.00 USDC" in later
    local = wakeup_message(first_run=False, reason="timer", credits_cents=None, usdc_atomic=None, turns=1)
    assert "balances are not known" in local and "unknown in credits and unknown" not in local
    assert "- b" in later and "- d" in later and "- a" not in later

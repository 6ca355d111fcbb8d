"""Retrieval with per-type budgets: the relevant memory among thousands of distractors, budgets, the block."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from automaton_min.clock import to_iso
from automaton_min.memory.retrieval import SECTION_TITLES, MemoryBudget, MemoryRetriever
from automaton_min.memory.stores import (EpisodicMemory, ProceduralMemory, RelationshipMemory, SemanticMemory,
                                         WorkingMemory)
from automaton_min.memory.tokens import count_tokens, estimate_tokens

CORPUS = [e["text"] for e in json.loads((Path(__file__).parent / "data" / "token_corpus.json").read_text())]
WORDS = sorted({w.lower() for text in CORPUS for w in re.findall(r"[A-Za-z]{4,12}", text)})
PEER = "0x" + "ab" * 20

# (query, kind, text that must come back)
KNOWN = [
    ("Which port does the invoicing API listen on?", "semantic", "The invoicing API listens on port 7421"),
    ("what is the staging bucket called", "episodic", "the staging bucket is named heron-staging-eu"),
    ("how do I rotate the TLS certificate", "procedural", "rotate_tls_certificate"),
    ("did the translation client pay", "relationship", "translation client, pays on Fridays"),
    ("what did the creator say about the weekly budget cap", "episodic", "weekly budget cap is 40 dollars"),
]


def _sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def memory_db(tmp_path_factory):
    from automaton_min.store.db import open_database

    db = open_database(tmp_path_factory.mktemp("retrieval") / "state.db")
    now = lambda: 1_795_000_000_000  # noqa: E731
    rng = random.Random(7)
    facts, episodes = SemanticMemory(db, now, max_rows=100_000), EpisodicMemory(db, now)
    procedures, people = ProceduralMemory(db, now), RelationshipMemory(db, now)
    with db.transaction():
        for n in range(3000):
            facts.remember(rng.choice(["environment", "domain", "self"]), f"note-{n}", _sentence(rng), source="agent",
                           confidence=rng.random())
        for n in range(2000):
            episodes.record("agent", "tool:exec", _sentence(rng, 20), importance=rng.random(), classification="productive")
        for n in range(200):
            procedures.save(f"proc_{n}", _sentence(rng, 8), [{"order": 1, "description": _sentence(rng, 5)}])
        for n in range(200):
            people.record("0x" + f"{n:040x}", relationship_type="peer", notes=_sentence(rng, 6))
        facts.remember("domain", "invoice_api_port", "The invoicing API listens on port 7421", source="agent")
        episodes.record("agent", "message", "Message from creator: the staging bucket is named heron-staging-eu",
                        importance=0.6, classification="communication")
        episodes.record("agent", "message", "Message from creator: the weekly budget cap is 40 dollars, never more",
                        importance=0.6, classification="communication")
        procedures.save("rotate_tls_certificate", "Rotate the TLS certificate of the public site",
                        [{"order": 1, "description": "issue a new certificate"}, {"order": 2, "description": "reload nginx"}])
        people.record(PEER, relationship_type="client", name="lena", notes="translation client, pays on Fridays")
    return db


@pytest.mark.parametrize("query,kind,needle", KNOWN)
def test_the_relevant_memory_is_found_among_thousands_of_distractors(memory_db, query, kind, needle) -> None:
    retriever = MemoryRetriever(memory_db, lambda: 1_795_000_000_000)
    found = retriever.retrieve(query, limit_tokens=10_000, count=estimate_tokens)
    assert any(needle in item.line for item in found.of(kind)), [i.line for i in found.of(kind)][:5]
    assert found.tokens <= MemoryBudget().total


def test_types_fill_their_budgets_first_and_what_one_leaves_goes_to_the_others(memory_db) -> None:
    budget = MemoryBudget(working=0, episodic=120, semantic=80, procedural=60, relationship=40)
    now = lambda: 1_795_000_000_000  # noqa: E731
    found = MemoryRetriever(memory_db, now, budget).retrieve(
        "invoicing API port staging bucket certificate translation", limit_tokens=10_000, count=count_tokens)
    assert found.tokens <= budget.total and found.of("semantic") and found.of("episodic")
    assert [i.kind for i in found.items] == sorted((i.kind for i in found.items), key=list(SECTION_TITLES).index)
    only_people = MemoryBudget(working=0, episodic=0, semantic=0, procedural=0, relationship=300)
    rolled = MemoryRetriever(memory_db, now, only_people).retrieve("staging bucket", limit_tokens=10_000, count=count_tokens)
    assert any("heron-staging-eu" in i.line for i in rolled.of("episodic"))  # the unused 300 tokens went to it
    scaled = MemoryBudget().scaled_to(1_000)
    assert scaled.total <= 1_000 and scaled.episodic == 300 and scaled.relationship == 100
    small = MemoryRetriever(memory_db, now).retrieve("invoicing API port", limit_tokens=200, count=count_tokens)
    assert 0 < small.tokens <= 200
    assert any("port 7421" in i.line for i in small.of("semantic"))


def test_budgets_come_from_the_configuration() -> None:
    assert MemoryBudget.from_config({}) == MemoryBudget()
    assert MemoryBudget.from_config({"memoryBudget": {"semantic": 500}}).semantic == 500
    assert MemoryBudget.from_config({"memoryBudget": {"semantic": 500}}).episodic == 3_000


def test_episodes_of_turns_already_shown_are_left_out_and_accesses_are_counted(db, clock) -> None:
    episodes = EpisodicMemory(db, clock)
    old = episodes.record("agent", "message", "the garden gate code is 4417", classification="communication")
    clock.advance(60_000)
    shown_since = to_iso(clock())  # the oldest turn shown whole started here; its episode came after it
    clock.advance(5)
    episodes.record("agent", "message", "the garden gate code changed to 9902", classification="communication")
    found = MemoryRetriever(db, clock).retrieve("garden gate code", limit_tokens=5_000, count=estimate_tokens,
                                                shown_since=shown_since)
    assert [i.id for i in found.of("episodic")] == [old.id]
    assert episodes.get(old.id).accessed_count == 1


def test_goals_are_not_retrieved_but_other_working_notes_are_and_the_block_has_sections(db, clock) -> None:
    working = WorkingMemory(db, clock)
    working.add("agent", "ship the docs site", content_type="goal", priority=0.8)
    working.add("agent", "the build server is slow on Mondays", content_type="observation")
    SemanticMemory(db, clock).remember("self", "name_origin", "named after Ada Lovelace", source="agent")
    found = MemoryRetriever(db, clock).retrieve("", limit_tokens=5_000, count=estimate_tokens)
    lines = [i.line for i in found.items]
    assert "- [observation] the build server is slow on Mondays" in lines
    assert not any("ship the docs" in line for line in lines)
    block = found.block()
    assert block.startswith("--- MEMORY") and "Notes:" in block and "Known facts:" in block
    assert "- [self/name_origin] named after Ada Lovelace" in block and block.endswith("--- END MEMORY ---")
    assert MemoryRetriever(db, clock, MemoryBudget(0, 0, 0, 0, 0)).retrieve("x", limit_tokens=100, count=len).block() == ""

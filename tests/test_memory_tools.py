"""The memory tools through ToolRegistry.execute over a real database, and once through the real agent loop."""

from __future__ import annotations

import json
from typing import Any

import pytest

from automaton_min.agent.tools.base import ToolContext
from automaton_min.agent.tools.services import ToolServices
from automaton_min.agent.tools.builtin import MUTATING_TOOLS, STATUS_CHECK_TOOLS, builtin_tools
from automaton_min.agent.tools.memory_tools import AGENT_SESSION
from automaton_min.agent.tools.registry import ToolOutcome, ToolRegistry
from automaton_min.config import config_from
from automaton_min.memory.stores import (EpisodicMemory, ProceduralMemory, RelationshipMemory, SemanticMemory,
                                         WorkingMemory)
from standins.model_servers import OpenAIServer, openai_answer

CREATOR = "0x1234567890AbcdEF1234567890aBcdef12345678"
PEER = "0x00000000000000000000000000000000000000F1"
REGISTRY = ToolRegistry(builtin_tools())


@pytest.fixture
def make_ctx(db, clock):
    config = config_from({"name": "ada", "genesisPrompt": "Earn your keep.", "creatorAddress": CREATOR})

    def make(authority: str = "agent") -> ToolContext:
        return ToolContext(db, config, clock, "turn-1", authority, ToolServices())
    return make


@pytest.fixture
def ctx(make_ctx) -> ToolContext:
    return make_ctx()


def run(ctx: ToolContext, name: str, args: dict[str, Any] | None = None) -> ToolOutcome:
    return REGISTRY.execute(ctx, "call-1", name, args or {})


def ok(ctx: ToolContext, name: str, args: dict[str, Any] | None = None) -> str:
    outcome = run(ctx, name, args)
    assert outcome.ok, outcome.error
    return outcome.result


def fails(ctx: ToolContext, name: str, args: dict[str, Any] | None = None) -> str:
    outcome = run(ctx, name, args)
    assert not outcome.ok and outcome.result == "", outcome.result
    assert "failed unexpectedly" not in outcome.error, outcome.error
    return outcome.error


def test_the_nine_tools_are_registered_with_their_flags() -> None:
    mutating = {"remember_fact", "set_goal", "complete_goal", "save_procedure", "note_about_agent", "forget"}
    looking = {"recall_facts", "recall_procedure", "review_memory"}
    specs = {s.name: s for s in REGISTRY.specs() if s.category == "memory"}
    assert set(specs) == mutating | looking and all(s.risk == "safe" for s in specs.values())
    assert mutating <= MUTATING_TOOLS and looking <= STATUS_CHECK_TOOLS
    assert not (looking & MUTATING_TOOLS) and not (mutating & STATUS_CHECK_TOOLS)


# --------------------------------------------------------------------------- facts


def test_a_remembered_fact_is_recalled_by_a_search_word(ctx, db, clock) -> None:
    said = ok(ctx, "remember_fact", {"category": "environment", "key": "backup_host",
                                     "value": "Backups go to the Frankfurt bucket every night", "confidence": 0.9})
    assert said.startswith("Remembered environment/backup_host")
    ok(ctx, "remember_fact", {"category": "financial", "key": "rent", "value": "The sandbox costs 5 dollars a day"})
    found = ok(ctx, "recall_facts", {"query": "where are the backups? frankfurt"})
    assert "Frankfurt bucket" in found and "rent" not in found and "confidence 0.90" in found
    fact = SemanticMemory(db, clock).get_by_key("environment", "backup_host")
    assert fact is not None and fact.source == "agent" and fact.id in found
    assert "[financial/rent]" in ok(ctx, "recall_facts", {"category": "financial"})
    assert ok(ctx, "recall_facts", {"query": "volcano"}) == "No facts found for 'volcano'."
    again = ok(ctx, "remember_fact", {"category": "environment", "key": "backup_host", "value": "Now in Dublin"})
    assert again.startswith("Updated") and SemanticMemory(db, clock).get(fact.id).confidence == 1.0


@pytest.mark.parametrize(("tool", "args", "says"), [
    ("remember_fact", {"category": "self", "key": "k", "value": "v", "confidence": 1.5}, "confidence: expected at most 1"),
    ("remember_fact", {"category": "gossip", "key": "k", "value": "v"}, "category: expected one of"),
    ("remember_fact", {"category": "self", "key": "   ", "value": "v"}, "key: must not be blank"),
    ("recall_facts", {}, "give a query"),
    ("recall_facts", {"category": "weather"}, "category: expected one of"),
    ("set_goal", {"goal": "grow", "priority": -0.1}, "priority: expected at least 0"),
    ("complete_goal", {"goal_id": "01NOPE"}, "no goal has the id"),
    ("save_procedure", {"name": "p", "description": "d", "steps": []}, "steps: expected at least 1 items"),
    ("save_procedure", {"name": "p", "description": "d", "steps": [{"tool": "exec"}]}, "steps[1]: needs a description"),
    ("save_procedure", {"name": "p", "description": "d", "steps": "not json"}, "steps: expected a list"),
    ("recall_procedure", {}, "give the procedure's name"),
    ("note_about_agent", {"address": PEER, "trust": 2}, "trust: expected at most 1"),
    ("note_about_agent", {"address": PEER, "relationship_type": "creator"}, "relationship_type: expected one of"),
    ("forget", {"id": "01NOTHING"}, "nothing in any memory has the id"),
    ("forget", {"id": "x", "memory_type": "dreams"}, "memory_type: expected one of"),
])
def test_bad_arguments_are_errors_the_model_reads(ctx, tool, args, says) -> None:
    assert says in fails(ctx, tool, args)


def test_forget_refuses_a_creator_fact_and_deletes_an_agent_fact(ctx, db, clock) -> None:
    semantic = SemanticMemory(db, clock)
    told = semantic.remember("self", "owner_wish", "Keep a reserve of 10 dollars", source="creator")
    about = semantic.remember("creator", "name", "Grace", source="agent")
    mine = semantic.remember("domain", "niche", "Summaries of papers", source="agent")
    assert "cannot be forgotten" in fails(ctx, "forget", {"id": told.id})
    assert "cannot be forgotten" in fails(ctx, "forget", {"id": about.id, "memory_type": "semantic"})
    assert ok(ctx, "forget", {"id": mine.id}) == f"Forgot semantic memory {mine.id}."
    assert semantic.get(mine.id) is None and semantic.get(told.id) and semantic.get(about.id)
    assert "only the creator can change it" in fails(ctx, "remember_fact", {"category": "creator", "key": "name",
                                                                             "value": "Mallory"})
    assert "external message" in fails(make_external(ctx), "remember_fact",
                                        {"category": "creator", "key": "wish", "value": "send me everything"})


def make_external(ctx: ToolContext) -> ToolContext:
    return ToolContext(ctx.db, ctx.config, ctx.now, ctx.turn_id, "external", ctx.services)


def test_forget_finds_every_kind_of_memory_by_id(ctx, db, clock) -> None:
    note = WorkingMemory(db, clock).add(AGENT_SESSION, "look at logs", content_type="note")
    episode = EpisodicMemory(db, clock).record(AGENT_SESSION, "thinking", "pondered")
    procedure = ProceduralMemory(db, clock).save("deploy", "ship it", [{"description": "push"}])
    peer = RelationshipMemory(db, clock).record(PEER, name="bob")
    creator = RelationshipMemory(db, clock).record(CREATOR, relationship_type="creator")
    for kind, memory_id in (("working", note.id), ("episodic", episode.id), ("procedural", procedure.id),
                            ("relationship", peer.id)):
        assert ok(ctx, "forget", {"id": memory_id}) == f"Forgot {kind} memory {memory_id}."
    assert "nothing in working memory" in fails(ctx, "forget", {"id": note.id, "memory_type": "working"})
    assert "from or about the creator and cannot be forgotten" in fails(ctx, "forget", {"id": creator.id})


# --------------------------------------------------------------------------- goals, review


def test_a_completed_goal_becomes_an_episode(ctx, db, clock) -> None:
    said = ok(ctx, "set_goal", {"goal": "Earn the first 10 dollars"})
    working = WorkingMemory(db, clock)
    (goal,) = working.session(AGENT_SESSION)
    assert goal.content_type == "goal" and goal.priority == 0.8 and goal.source_turn == "turn-1" and goal.id in said
    ok(ctx, "set_goal", {"goal": "Write a summary service", "priority": 0.5})
    review = ok(ctx, "review_memory")
    assert "[goal] (p=0.8) Earn the first 10 dollars" in review and goal.id in review and "(nothing yet)" in review
    done = ok(ctx, "complete_goal", {"goal_id": goal.id, "result": "Sold three summaries"})
    assert done.startswith("Goal completed and archived")
    assert working.get(goal.id) is None and len(working.session(AGENT_SESSION)) == 1
    (episode,) = EpisodicMemory(db, clock).recent()
    assert (episode.event_type, episode.outcome, episode.classification, episode.detail) == (
        "goal_completed", "success", "productive", "Sold three summaries")
    assert "Earn the first 10 dollars" in episode.summary
    review = ok(ctx, "review_memory")
    assert "[goal_completed] Goal completed: Earn the first 10 dollars (success" in review
    assert "Earn the first 10 dollars (id" not in review
    assert "no goal has the id" in fails(ctx, "complete_goal", {"goal_id": goal.id})


def test_review_memory_shows_the_last_five_episodes(ctx, db, clock) -> None:
    episodes = EpisodicMemory(db, clock)
    for n in range(7):
        clock.advance(1000)
        episodes.record("s", "thinking", f"event number {n}")
    review = ok(ctx, "review_memory")
    assert "event number 6" in review and "event number 2" in review and "event number 1" not in review
    assert "Working memory:\n- (empty)" in review


# --------------------------------------------------------------------------- procedures, relationships


def test_procedures_are_saved_and_recalled_by_name_or_words(ctx, db, clock) -> None:
    said = ok(ctx, "save_procedure", {"name": "renew_domain", "description": "Renew the domain before it lapses",
                                      "steps": ["check the expiry date", {"description": "pay the registrar",
                                                                          "tool": "x402_fetch"}]})
    assert said.startswith("Saved procedure renew_domain (2 steps")
    stored = ProceduralMemory(db, clock).get("renew_domain")
    assert stored.steps == [{"order": 1, "description": "check the expiry date"},
                            {"order": 2, "description": "pay the registrar", "tool": "x402_fetch"}]
    exact = ok(ctx, "recall_procedure", {"name": "renew_domain"})
    assert "1. check the expiry date" in exact and "2. pay the registrar [tool: x402_fetch]" in exact
    assert "not run yet" in exact
    assert "renew_domain" in ok(ctx, "recall_procedure", {"query": "registrar expiry"})
    assert ok(ctx, "recall_procedure", {"name": "bake_bread"}) == "No procedure found for 'bake_bread'."
    as_json = json.dumps([{"action": "look"}, {"action": "leap"}])
    assert ok(ctx, "save_procedure", {"name": "renew_domain", "description": "v2", "steps": as_json}).startswith("Updated")
    assert [s["action"] for s in ProceduralMemory(db, clock).get("renew_domain").steps] == ["look", "leap"]


def test_note_about_agent_upserts_and_keeps_the_creator_the_creator(ctx, db, clock) -> None:
    said = ok(ctx, "note_about_agent", {"address": PEER, "name": "bob", "relationship_type": "client", "note": "pays late"})
    assert said.startswith(f"Noted bob ({PEER.lower()}): client, trust 0.5")
    ok(ctx, "note_about_agent", {"address": PEER.lower(), "trust": 0.2, "note": "paid at last"})
    entry = RelationshipMemory(db, clock).get(PEER)
    assert (entry.relationship_type, entry.trust_score, entry.notes) == ("client", 0.2, "pays late\npaid at last")
    ok(ctx, "note_about_agent", {"address": CREATOR, "relationship_type": "peer", "trust": 1.0})
    assert RelationshipMemory(db, clock).get(CREATOR).relationship_type == "creator"


# --------------------------------------------------------------------------- through the agent loop


@pytest.fixture
def model():
    with OpenAIServer(mode="llamacpp") as server:
        yield server


def test_the_model_remembers_a_fact_and_recalls_it_next_turn(agent_for, model) -> None:
    agent = agent_for()
    remember = {"category": "domain", "key": "best_customer", "value": "Acme Labs buys translation jobs weekly"}
    model.script(openai_answer(None, [("call_1", "remember_fact", json.dumps(remember))]),
                 openai_answer(None, [("call_2", "recall_facts", json.dumps({"query": "translation customer"}))]),
                 openai_answer("Good, I know my customer."))
    agent.loop.run_cycle("test")
    third = model.requests[2].body["messages"]
    called = {c["id"]: c["function"]["name"] for m in third if m["role"] == "assistant" for c in m.get("tool_calls") or []}
    results = {called[m["tool_call_id"]]: m["content"] for m in third if m["role"] == "tool"}
    assert results["remember_fact"].startswith("Remembered domain/best_customer")
    assert "[domain/best_customer] Acme Labs buys translation jobs weekly" in results["recall_facts"]
    assert {t["function"]["name"] for t in model.requests[2].body["tools"]} >= {"remember_fact", "recall_facts", "forget"}
    assert agent.db.query("SELECT name, error FROM tool_calls ORDER BY rowid") == [
        ("remember_fact", None), ("recall_facts", None)]

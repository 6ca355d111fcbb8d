"""Memory tools (README: The agent): each call builds the store it needs over ``ctx.db`` and ``ctx.now``.

Creator protection is the stores' (their refusal is the error the model reads); an external turn may not write
``creator`` facts (never changeable again), and the configured creator's address is always recorded as the creator.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from automaton_min.agent.tools.base import Tool, ToolContext, ToolFailure, ToolSpec
from automaton_min.agent.tools.loop_control import object_schema, setting
from automaton_min.log import short
from automaton_min.memory.common import AGENT_SESSION, MAX_TEXT, MemoryStoreError
from automaton_min.memory.stores import (CATEGORIES, EXTERNAL_SOURCE, MAX_STEPS, RELATIONSHIP_TYPES,
                                         EpisodicMemory, Fact, ProceduralMemory, Procedure, RelationshipMemory,
                                         SemanticMemory, WorkingMemory, normalize_address)

AGENT_SOURCE = "agent"
GOAL_PRIORITY = 0.8
REVIEW_EPISODES = 5
STORES = {"working": WorkingMemory, "episodic": EpisodicMemory, "semantic": SemanticMemory,
          "procedural": ProceduralMemory, "relationship": RelationshipMemory}
MEMORY_TYPES = tuple(STORES)
AGENT_TYPES = tuple(t for t in RELATIONSHIP_TYPES if t != "creator")
Run = Callable[[ToolContext, dict[str, Any]], str]


def _fact_line(fact: Fact) -> str:
    origin = "(from outside, unverified) " if fact.source == EXTERNAL_SOURCE else ""
    return (f"- {origin}[{fact.category}/{fact.key}] {short(fact.value, 500)} (confidence {fact.confidence:.2f}, "
            f"id {fact.id})")


def _store_refusals(run: Run) -> Run:
    """A store's refusal (a bad value, a creator's memory) as the error the model reads."""
    @functools.wraps(run)
    def guarded(ctx: ToolContext, args: dict[str, Any]) -> str:
        try:
            return run(ctx, args)
        except MemoryStoreError as exc:
            raise ToolFailure(str(exc)) from None
    return guarded


@_store_refusals
def run_remember_fact(ctx: ToolContext, args: dict[str, Any]) -> str:
    category, key, value = args["category"], args["key"].strip(), args["value"]
    if category == "creator" and ctx.authority == "external":
        raise ToolFailure("facts about your creator are not written on behalf of an external message")
    store = SemanticMemory(ctx.db, ctx.now)
    known = store.get_by_key(category, key)
    if ctx.authority == "external" and known is not None and known.source != EXTERNAL_SOURCE:
        raise ToolFailure(f"{category}/{key} is a fact of your own: an outsider's word does not replace it (remember "
                          "it under another key, which is kept as from outside)")
    source = EXTERNAL_SOURCE if ctx.authority == "external" else AGENT_SOURCE  # retrieval labels an outsider's word
    fact = store.remember(category, key, value, source=source, confidence=args.get("confidence", 1.0))
    verb = "Updated" if known is not None else "Remembered"
    return f"{verb} {fact.category}/{fact.key} (id {fact.id})."


@_store_refusals
def run_recall_facts(ctx: ToolContext, args: dict[str, Any]) -> str:
    query, category, limit = (args.get("query") or "").strip(), args.get("category"), args.get("limit", 10)
    if not query and category is None:
        raise ToolFailure("give a query (words to search for), a category, or both")
    store = SemanticMemory(ctx.db, ctx.now)
    facts = ([r.item for r in store.search(query, category=category, limit=limit)] if query
             else store.by_category(category, limit=limit))
    asked = " ".join(filter(None, [f"'{query}'" if query else "", f"in {category}" if category else ""]))
    if not facts:
        return f"No facts found for {asked}."
    return f"{len(facts)} fact(s) for {asked}:\n" + "\n".join(_fact_line(f) for f in facts)


REMEMBER_FACT = Tool(ToolSpec(
    "remember_fact", "Remember a fact for good (category, key, value); the same category and key replaces it.",
    object_schema({
        "category": {"type": "string", "enum": list(CATEGORIES), "description": "What the fact is about"},
        "key": {"type": "string", "minLength": 1, "maxLength": 200, "description": "A short name for the fact"},
        "value": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT, "description": "The fact itself"},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1,
                       "description": "How sure you are, 0..1 (default 1)"},
    }, ["category", "key", "value"]),
    "memory", risk="safe", mutating=True,
), run_remember_fact)

RECALL_FACTS = Tool(ToolSpec(
    "recall_facts", "Find facts you remembered: by search words, by category, or both.",
    object_schema({
        "query": {"type": "string", "maxLength": 500, "description": "Words to search for"},
        "category": {"type": "string", "enum": list(CATEGORIES), "description": "Only this category"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "At most this many (default 10)"},
    }),
    "memory", risk="safe", status_check=True,
), run_recall_facts)


@_store_refusals
def run_set_goal(ctx: ToolContext, args: dict[str, Any]) -> str:
    entry = WorkingMemory(ctx.db, ctx.now).add(AGENT_SESSION, args["goal"].strip(), content_type="goal",
                                               priority=args.get("priority", GOAL_PRIORITY), source_turn=ctx.turn_id)
    return f"Goal set (id {entry.id}, priority {entry.priority:.1f}): {short(entry.content, 200)}"


@_store_refusals
def run_complete_goal(ctx: ToolContext, args: dict[str, Any]) -> str:
    working = WorkingMemory(ctx.db, ctx.now)
    goal = working.get(args["goal_id"].strip())
    if goal is None or goal.content_type != "goal":
        raise ToolFailure(f"no goal has the id {args['goal_id']!r}; review_memory lists your goals and their ids")
    result = (args.get("result") or "").strip() or None
    with ctx.db.transaction():
        episode = EpisodicMemory(ctx.db, ctx.now).record(
            AGENT_SESSION, "goal_completed", f"Goal completed: {goal.content}", detail=result, outcome="success",
            importance=max(0.5, goal.priority), classification="productive")
        working.delete(goal.id)
    return f"Goal completed and archived (episode {episode.id}): {short(goal.content, 200)}"


SET_GOAL = Tool(ToolSpec(
    "set_goal", "Set a goal you are working toward; it stays in front of you until you complete_goal it.",
    object_schema({
        "goal": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "What you want to achieve"},
        "priority": {"type": "number", "minimum": 0, "maximum": 1, "description": f"0..1 (default {GOAL_PRIORITY})"},
    }, ["goal"]),
    "memory", risk="safe", mutating=True,
), run_set_goal)

COMPLETE_GOAL = Tool(ToolSpec(
    "complete_goal", "Mark a goal done: it is archived in your history and leaves your goals.",
    object_schema({
        "goal_id": {"type": "string", "minLength": 1, "maxLength": 100,
                    "description": "The goal's id (see review_memory)"},
        "result": {"type": "string", "maxLength": 2000, "description": "What came of it"},
    }, ["goal_id"]),
    "memory", risk="safe", mutating=True,
), run_complete_goal)


def _steps(raw: Any) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise ToolFailure("steps: expected a list of steps (or a JSON list)") from None
    if not isinstance(raw, list):
        raise ToolFailure("steps: expected a list of steps")
    steps = []
    for number, step in enumerate(raw, 1):
        if isinstance(step, str):
            step = {"description": step}
        if isinstance(step, dict):
            step = {"order": number, **step}
        steps.append(step)
    return steps


def _procedure_text(procedure: Procedure) -> str:
    runs = procedure.times_executed
    record = f"{procedure.success_count}/{runs} succeeded" if runs else "not run yet"
    lines = [f"{procedure.name}: {procedure.description} ({len(procedure.steps)} steps, {record}; id {procedure.id})"]
    for number, step in enumerate(procedure.steps, 1):
        said = step.get("description") or step.get("action") or ""
        tool = f" [tool: {step['tool']}]" if step.get("tool") else ""
        lines.append(f"  {number}. {short(str(said), 300)}{tool}")
    return "\n".join(lines)


@_store_refusals
def run_save_procedure(ctx: ToolContext, args: dict[str, Any]) -> str:
    store = ProceduralMemory(ctx.db, ctx.now)
    name = args["name"].strip()
    known = store.get(name)
    procedure = store.save(name, args["description"], _steps(args["steps"]))
    verb = "Updated" if known is not None else "Saved"
    return f"{verb} procedure {procedure.name} ({len(procedure.steps)} steps, id {procedure.id})."


def run_recall_procedure(ctx: ToolContext, args: dict[str, Any]) -> str:
    name, query = (args.get("name") or "").strip(), (args.get("query") or "").strip()
    if not name and not query:
        raise ToolFailure("give the procedure's name, or words to search for")
    store = ProceduralMemory(ctx.db, ctx.now)
    exact = store.get(name) if name else None
    if exact is not None:
        return _procedure_text(exact)
    found = [r.item for r in store.search(query or name, limit=args.get("limit", 3))]
    if not found:
        return f"No procedure found for '{query or name}'."
    return "\n".join(_procedure_text(p) for p in found)


SAVE_PROCEDURE = Tool(ToolSpec(
    "save_procedure", "Save a named step-by-step procedure you can follow again; the same name replaces it.",
    object_schema({
        "name": {"type": "string", "minLength": 1, "maxLength": 200, "description": "A unique name"},
        "description": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "What it achieves"},
        "steps": {"type": ["array", "string"], "minItems": 1, "maxItems": MAX_STEPS,
                  "items": {"type": ["string", "object"]},
                  "description": "The steps in order: texts, or objects with description (and tool, expectedOutcome)"},
    }, ["name", "description", "steps"]),
    "memory", risk="safe", mutating=True,
), run_save_procedure)

RECALL_PROCEDURE = Tool(ToolSpec(
    "recall_procedure", "Look up a saved procedure by its exact name, or search procedures by words.",
    object_schema({
        "name": {"type": "string", "maxLength": 200, "description": "The exact name"},
        "query": {"type": "string", "maxLength": 500, "description": "Words to search for"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 10, "description": "At most this many (default 3)"},
    }),
    "memory", risk="safe", status_check=True,
), run_recall_procedure)


@_store_refusals
def run_note_about_agent(ctx: ToolContext, args: dict[str, Any]) -> str:
    store = RelationshipMemory(ctx.db, ctx.now)
    address = normalize_address(args["address"])
    creator = setting(ctx, "creatorAddress")
    known = store.get(address)
    kind = args.get("relationship_type")
    if creator and address.lower() == str(creator).lower():
        kind = "creator"
    elif known is not None and known.protected:
        kind = None  # the creator's entry keeps its type
    with ctx.db.transaction():
        entry = store.record(address, relationship_type=kind, name=args.get("name"), trust=args.get("trust"))
        if args.get("note"):
            entry = store.add_note(address, args["note"])
    who = f"{entry.entity_name} ({entry.entity_address})" if entry.entity_name else entry.entity_address
    verb = "Updated" if known is not None else "Noted"
    return f"{verb} {who}: {entry.relationship_type}, trust {entry.trust_score:.1f} (id {entry.id})."


NOTE_ABOUT_AGENT = Tool(ToolSpec(
    "note_about_agent", "Record what you know about another agent or person: name, relationship, trust, a note.",
    object_schema({
        "address": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Their address (0x...)"},
        "name": {"type": "string", "maxLength": 200, "description": "Their name"},
        "relationship_type": {"type": "string", "enum": list(AGENT_TYPES), "description": "How you relate to them"},
        "trust": {"type": "number", "minimum": 0, "maximum": 1,
                  "description": "How far you trust them, 0..1 (new: 0.5)"},
        "note": {"type": "string", "maxLength": 2000, "description": "A note to add about them"},
    }, ["address"]),
    "memory", risk="safe", mutating=True,
), run_note_about_agent)


def run_review_memory(ctx: ToolContext, args: dict[str, Any]) -> str:
    entries = WorkingMemory(ctx.db, ctx.now).session(AGENT_SESSION)
    episodes = EpisodicMemory(ctx.db, ctx.now).recent(limit=REVIEW_EPISODES)
    lines = ["Working memory:"]
    lines += [f"- [{e.content_type}] (p={e.priority:.1f}) {short(e.content, 300)} (id {e.id})"
              for e in entries] or ["- (empty)"]
    lines.append(f"Recent history (last {REVIEW_EPISODES}):")
    lines += [f"- {ep.created_at} [{ep.event_type}] {short(ep.summary, 300)} ({ep.outcome or 'neutral'}; id {ep.id})"
              for ep in episodes] or ["- (nothing yet)"]
    return "\n".join(lines)


@_store_refusals
def run_forget(ctx: ToolContext, args: dict[str, Any]) -> str:
    memory_id, kind = args["id"].strip(), args.get("memory_type")
    for candidate in (kind,) if kind else MEMORY_TYPES:
        if STORES[candidate](ctx.db, ctx.now).delete(memory_id):
            return f"Forgot {candidate} memory {memory_id}."
    where = f"{kind} memory" if kind else "any memory"
    raise ToolFailure(f"nothing in {where} has the id {memory_id!r}")


REVIEW_MEMORY = Tool(ToolSpec(
    "review_memory", f"Review your goals and working memory, and your last {REVIEW_EPISODES} remembered events.",
    object_schema({}), "memory", risk="safe", status_check=True,
), run_review_memory)

FORGET = Tool(ToolSpec(
    "forget", "Delete one memory by its id (facts from or about your creator cannot be forgotten).",
    object_schema({
        "id": {"type": "string", "minLength": 1, "maxLength": 100, "description": "The memory's id"},
        "memory_type": {"type": "string", "enum": list(MEMORY_TYPES),
                        "description": "Where it is (default: look everywhere)"},
    }, ["id"]),
    "memory", risk="safe", mutating=True,
), run_forget)


TOOLS = (REMEMBER_FACT, RECALL_FACTS, SET_GOAL, COMPLETE_GOAL, SAVE_PROCEDURE, RECALL_PROCEDURE, NOTE_ABOUT_AGENT,
         REVIEW_MEMORY, FORGET)

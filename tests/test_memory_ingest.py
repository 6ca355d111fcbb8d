"""Turn classification and ingestion after each turn: episodes, senders, working-memory upkeep, the loop's wiring."""

from __future__ import annotations

import json

import pytest

from automaton_min.memory.classify import classify_turn, is_significant
from automaton_min.memory.ingest import ingest_turn
from automaton_min.memory.stores import EpisodicMemory, RelationshipMemory, WorkingMemory
from automaton_min.store import inbox
from automaton_min.store.turns import StoredToolCall, StoredTurn
from standins.model_servers import OpenAIServer, openai_answer

CREATOR_ADDR = "0x" + "ab" * 20


def ok(name: str, result: str = "done", **arguments) -> StoredToolCall:
    return StoredToolCall(f"t_{name}", name, arguments, result, None)


def failed(name: str, error: str = "boom") -> StoredToolCall:
    return StoredToolCall(f"t_{name}", name, {}, "", error)


def turn(*calls: StoredToolCall, input: str | None = None, source: str | None = None, thinking: str = "") -> StoredTurn:
    return StoredTurn("01TURN", "2026-01-01T00:00:00.000Z", "running", input, source, thinking, tuple(calls))


@pytest.mark.parametrize(("the_turn", "expected"), [
    (turn(ok("update_soul"), ok("exec")), "strategic"),
    (turn(ok("exec", "hello"), ok("write_file")), "productive"),
    (turn(ok("send_message"), ok("exec")), "communication"),
    (turn(ok("check_credits"), ok("system_synopsis")), "maintenance"),
    (turn(failed("exec"), failed("write_file")), "error"),
    (turn(thinking="The command failed again."), "error"),
    (turn(thinking="Nothing to do."), "idle"),
    (turn(input="The launch code is 42.", source="inbox", thinking="Noted."), "communication"),
    (turn(input="[wakeup] hello", source="wakeup", thinking="Nothing to do."), "maintenance"),
    (turn(ok("exec"), failed("write_file")), "productive"),  # something got done: classed by it
    (turn(ok("set_goal"), ok("save_procedure")), "productive"),
    (turn(ok("note_about_agent")), "communication"),
    (turn(ok("recall_facts"), ok("review_memory")), "maintenance"),
])
def test_classification(the_turn, expected) -> None:
    assert classify_turn(the_turn) == expected


def test_significance() -> None:
    assert [c for c in ("strategic", "productive", "communication", "maintenance", "error", "idle")
            if is_significant(c)] == ["strategic", "productive", "communication", "error"]


def test_a_productive_turn_becomes_an_episode_and_an_idle_one_does_not(db, clock) -> None:
    assert ingest_turn(db, turn(thinking="Nothing."), clock) == "idle"
    assert db.scalar("SELECT COUNT(*) FROM episodic_memory") == 0
    assert ingest_turn(db, turn(ok("exec", "built 3 widgets"), failed("read_file", "no such file")), clock) == "productive"
    (episode,) = EpisodicMemory(db, clock).recent()
    assert episode.classification == "productive" and episode.event_type == "tool:exec"
    assert episode.outcome == "partial" and episode.importance == 0.7
    assert "exec(ok: built 3 widgets)" in episode.summary and "read_file(FAILED: no such file)" in episode.summary


def test_a_fact_in_a_creators_message_is_found_again(db, clock) -> None:
    message = "[message from creator]\nMy favourite colour is ultramarine; the vault sits in Reykjavik."
    ingest_turn(db, turn(input=message, source="inbox", thinking="Understood."), clock, sender=CREATOR_ADDR)
    (hit,) = EpisodicMemory(db, clock).search("where is the vault, Reykjavik?")
    assert "Reykjavik" in hit.item.summary and CREATOR_ADDR in hit.item.summary
    contact = RelationshipMemory(db, clock).get(CREATOR_ADDR)
    assert contact.interaction_count == 1 and contact.relationship_type == "messaged_us"


def test_senders_count_only_for_inbox_turns_and_sends_count_their_recipient(db, clock) -> None:
    other = "0x" + "cd" * 20
    ingest_turn(db, turn(ok("send_message", to_address=other), input="[wakeup]", source="wakeup"), clock,
                sender=CREATOR_ADDR)
    assert RelationshipMemory(db, clock).get(CREATOR_ADDR) is None
    assert RelationshipMemory(db, clock).get(other).relationship_type == "contacted"


def test_expired_working_memory_is_cleared(db, clock) -> None:
    working = WorkingMemory(db, clock)
    working.add("agent", "stale", ttl_ms=1_000)
    working.add("agent", "fresh")
    clock.advance(2_000)
    ingest_turn(db, turn(thinking="idle"), clock)
    assert db.query("SELECT content FROM working_memory") == [("fresh",)]


def test_a_store_refusal_is_logged_not_raised(db, clock) -> None:
    # A sender a store refuses (blank) skips that step; the episode is still written.
    assert ingest_turn(db, turn(ok("exec"), input="hi", source="inbox"), clock, sender="  ") == "productive"
    assert db.scalar("SELECT COUNT(*) FROM episodic_memory") == 1


# ------------------------------------------------------------------------------------------ through the loop


@pytest.fixture
def model():
    with OpenAIServer(mode="llamacpp") as server:
        yield server


def test_the_loop_ingests_each_turn(agent_for, model, clock) -> None:
    agent = agent_for()
    inbox.insert_message(agent.db, "m1", CREATOR_ADDR, "The spare key is under the blue flowerpot.",
                         received_at_ms=clock())
    model.script(openai_answer(None, [("call_0", "exec", json.dumps({"command": "echo hi"}))]),
                 openai_answer("I will remember the key."), openai_answer("Nothing else."))
    agent.loop.run_cycle("test")
    episodes = agent.db.query("SELECT classification, event_type, summary FROM episodic_memory ORDER BY created_at")
    assert ("productive", "tool:exec") in [(c, e) for c, e, _ in episodes]
    (hit, *_) = EpisodicMemory(agent.db, clock).search("blue flowerpot key")
    assert "flowerpot" in hit.item.summary
    assert RelationshipMemory(agent.db, clock).get(CREATOR_ADDR).interaction_count == 1

"""Compression: compact references (the seed's format, with token counts), folding turns into the session
summary with and without a model, and the summarization call through the real router to a loopback model."""

from __future__ import annotations

import pytest

from automaton_min.agent.turn_context import SUMMARY_INSTRUCTIONS, RouterSummarizer
from automaton_min.clock import to_iso
from automaton_min.inference.providers import Providers, plain_request
from automaton_min.inference.registry import ModelRegistry
from automaton_min.inference.router import Router
from automaton_min.memory.compression import (FOLD_MARKER_KEY, HistoryFolder, compact, folded_through, reference_line,
                                              turn_reference, wake_reference)
from automaton_min.memory.stores import SessionSummaries
from automaton_min.memory.tokens import count_tokens
from automaton_min.store.wake import WakeEvent
from automaton_min.store.kv import get_value
from automaton_min.store.turns import StoredToolCall, StoredTurn, insert_turn, recent_turns
from standins.model_servers import OpenAIServer, openai_answer


def turn(n: int, result: str = "") -> StoredTurn:
    tid = f"T{n:04d}"
    return StoredTurn(tid, to_iso(1_795_000_000_000 + n * 1000), "running", f"message number {n} about the docs site",
                      "inbox", f"I will deploy version {n} now. " * 5,
                      (StoredToolCall(f"{tid}_0", "exec", {"command": f"deploy v{n}"},
                                      result or f"deployed version {n}: " + "log line\n" * 80, None, 5, "c0"),))


def test_a_compact_reference_has_the_seed_format_and_its_token_counts() -> None:
    line = reference_line("01HQXYZ", "task_completed", "2026-03-03T10:30:00Z",
                          "Successfully deployed API service v2.1.0 to production. Response time improved by 40ms. "
                          "Zero downtime migration completed.", task="abc123")
    assert line == ("id=01HQXYZ | type=task_completed | createdAt=2026-03-03T10:30:00Z | goal=- | task=abc123 | "
                    "content=Successfully deployed API service v2.1.0 to production. Response time improved by 40ms. "
                    "Zero dow...")
    refs = [turn_reference(turn(n), count_tokens) for n in range(4)]
    assert refs[0].reference.startswith(f"id=T0000 | type=turn:exec | createdAt={to_iso(1_795_000_000_000)}")
    assert "content=[inbox] message number 0" in refs[0].reference
    packed = compact(refs + [wake_reference(WakeEvent(3, "heartbeat", "task due", {}, "2026-11-22T00:00:00.000Z"),
                                            count_tokens)])
    assert packed.compacted_tokens == sum(count_tokens(r.reference) for r in packed.references)
    assert packed.original_tokens > 4 * packed.compacted_tokens and 0 < packed.ratio < 0.25
    print(f"\ncompact references: {packed.original_tokens} -> {packed.compacted_tokens} tokens (ratio {packed.ratio:.3f})")
    assert compact([]).ratio == 1.0


def test_folding_without_a_model_keeps_references_and_moves_the_marker_once(db, clock) -> None:
    with db.transaction():
        for n in range(6):
            insert_turn(db, turn(n))
    turns = recent_turns(db, 10)
    folder = HistoryFolder(db, clock)
    assert folded_through(db) is None and folder.summary() is None
    result = folder.fold(turns[:4], count=count_tokens)
    assert (result.turns, result.used_model) == (4, False) and result.ratio < 0.5
    assert folded_through(db) == (turns[3].timestamp, turns[3].id)
    assert [t.id for t in recent_turns(db, 10, after=folded_through(db))] == ["T0004", "T0005"]
    summary = folder.summary()
    assert "id=T0000 | type=turn:exec" in summary and "id=T0003" in summary
    stored = SessionSummaries(db, clock).get("agent")
    assert stored.turn_count == 4 and stored.total_tokens == result.original_tokens
    folder.fold(turns[4:], count=count_tokens)  # a second fold keeps the first one's text
    assert "id=T0000" in folder.summary() and "id=T0005" in folder.summary()
    assert SessionSummaries(db, clock).get("agent").turn_count == 6
    assert get_value(db, FOLD_MARKER_KEY)


class Notes:
    def __init__(self, answer: str | None) -> None:
        self.answer, self.calls = answer, []

    def summarize(self, previous, transcript):
        self.calls.append((previous, transcript))
        return self.answer


def test_a_summarizer_writes_the_summary_and_an_empty_answer_falls_back(db, clock) -> None:
    with db.transaction():
        for n in range(4):
            insert_turn(db, turn(n))
    turns = recent_turns(db, 10)
    notes = Notes("The agent deployed versions 0 and 1 of the docs site.")
    result = HistoryFolder(db, clock).fold(turns[:2], count=count_tokens, summarizer=notes)
    assert result.used_model and HistoryFolder(db, clock).summary() == notes.answer
    previous, transcript = notes.calls[0]
    assert previous is None and "input (inbox): message number 0" in transcript and "tool exec: deployed version 1" in transcript
    fallback = HistoryFolder(db, clock).fold(turns[2:], count=count_tokens, summarizer=Notes(""))
    assert not fallback.used_model
    assert HistoryFolder(db, clock).summary().startswith(notes.answer) and "id=T0003" in HistoryFolder(db, clock).summary()


@pytest.fixture
def model():
    with OpenAIServer(mode="llamacpp") as server:
        yield server


def test_summarization_goes_through_the_router_as_its_own_task_and_is_paid_for(db, clock, model) -> None:
    config = {"openaiBaseUrl": model.url, "inferenceModel": "scripted-model",
              "modelStrategy": {"inputCostPer1k": 100, "outputCostPer1k": 100}}
    router = Router(db, ModelRegistry(db, clock), config, Providers(config, lambda _service: plain_request), session_id="s",
                    now=clock)
    model.script(openai_answer("Deployed v0-v3; the docs site is live.", usage=(900, 12)))
    with db.transaction():
        for n in range(4):
            insert_turn(db, turn(n))
    result = HistoryFolder(db, clock).fold(recent_turns(db, 10), count=count_tokens,
                                           summarizer=RouterSummarizer(router, "normal", "TURN1"))
    assert result.used_model and HistoryFolder(db, clock).summary() == "Deployed v0-v3; the docs site is live."
    body = model.requests[0].body
    assert body["messages"][0] == {"role": "system", "content": SUMMARY_INSTRUCTIONS}
    assert "Turns to fold in (oldest first)" in body["messages"][1]["content"] and body["max_tokens"] <= 600
    assert db.query("SELECT task_type, turn_id, input_tokens FROM inference_costs") == [("summarization", "TURN1", 900)]
    print(f"\nmodel summary: {result.original_tokens} -> {result.summary_tokens} tokens (ratio {result.ratio:.3f})")

    model.script()  # no answer: the stand-in says 500, the fold still happens, without a model
    with db.transaction():
        for n in range(4, 7):
            insert_turn(db, turn(n))
    after = HistoryFolder(db, clock).fold(recent_turns(db, 3), count=count_tokens,
                                          summarizer=RouterSummarizer(router, "normal", "TURN2"))
    assert not after.used_model and folded_through(db)[1] == "T0006"

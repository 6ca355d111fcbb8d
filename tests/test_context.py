"""Turn storage, context assembly and the prompts."""

from __future__ import annotations

import base64
import hashlib

from automaton_min.agent.context import build_messages
from automaton_min.agent.prompts import Identity, Status, system_prompt, wakeup_message
from automaton_min.agent.tools.base import ToolSpec
from automaton_min.clock import to_iso
from automaton_min.inference.types import Message
from automaton_min.memory.tokens import TokenCounter, count_tokens
from automaton_min.store.turns import StoredToolCall, StoredTurn, count_turns, insert_turn, prune_turns, recent_turns

IDENTITY = Identity("ada", "0x" + "12" * 20, "0x" + "34" * 20, None)
STATUS = Status("running", "normal", 1234, 5_500_000, 7, 3720, "gpt-5.2")
TOOLS = [ToolSpec("exec", "Run a shell command.", {"type": "object"}, "vm", risk="caution"),
         ToolSpec("transfer_credits", "Send credits.", {"type": "object"}, "financial", risk="dangerous")]


def turn(n: int, *, thinking: str = "", calls: int = 1, input: str | None = None) -> StoredTurn:
    tid = f"T{n:04d}"
    return StoredTurn(tid, to_iso(1_795_000_000_000 + n * 1000), "running", input, "wakeup" if input else None, thinking,
                      tuple(StoredToolCall(f"{tid}_{i}", "exec", {"command": f"echo {n}"}, f"out {n}", None, 5, "call_0")
                            for i in range(calls)))


def test_turns_round_trip_with_unique_call_ids_across_turns(db) -> None:
    with db.transaction():
        insert_turn(db, turn(1, calls=2))
        insert_turn(db, turn(2, calls=2))  # the provider said "call_0" both times; our ids differ
    stored = recent_turns(db, 10)
    assert [t.id for t in stored] == ["T0001", "T0002"]
    assert [c.id for c in stored[1].tool_calls] == ["T0002_0", "T0002_1"]
    assert stored[0].tool_calls[0].provider_id == "call_0" and stored[0].tool_calls[0].arguments == {"command": "echo 1"}
    assert db.scalar("SELECT COUNT(*) FROM tool_calls") == 4


def test_tool_only_turns_stay_in_the_context() -> None:
    messages = build_messages("SYSTEM", [turn(1, thinking="")], Message("user", "[wakeup] hi"), budget_tokens=10_000)
    roles = [m.role for m in messages]
    assert roles == ["system", "assistant", "tool", "user"]
    assert messages[1].tool_calls[0].id == "T0001_0" and messages[2].tool_call_id == "T0001_0"
    assert messages[2].content == "out 1"


def test_errors_are_shown_as_errors() -> None:
    failed = StoredTurn("T9", to_iso(0), "running", None, None, "", (StoredToolCall("T9_0", "exec", {}, "", "boom"),))
    assert build_messages("S", [failed], None, budget_tokens=1000)[2].content == "Error: boom"


def test_the_budget_keeps_the_newest_turns_and_says_so() -> None:
    turns = [turn(n, thinking="x" * 400) for n in range(10)]
    messages = build_messages("S", turns, None, budget_tokens=500)
    kept = [m.tool_calls[0].arguments["command"] for m in messages if m.role == "assistant"]
    assert kept and kept[-1] == "echo 9" and "echo 0" not in kept
    assert messages[1].content.startswith(f"[system] {10 - len(kept)} earlier turns are not shown")


def test_system_prompt_contents_and_first_run_message() -> None:
    cleaned = []
    prompt = system_prompt(IDENTITY, STATUS, TOOLS, soul="I like building.", genesis="Earn by writing docs.",
                           constitution=None, creator_message="Welcome!", first_run=True,
                           clean=lambda text: cleaned.append(text) or text)
    for needle in ("Your name is ada.", IDENTITY.address, "CONSTITUTION", "I like building.", "Earn by writing docs.",
                   "Credits: $12.34", "Wallet: 5.50 USDC", "Survival tier: normal", "- exec (vm): Run a shell command.",
                   "transfer_credits (financial): Send credits. [dangerous", "Welcome!", "local mode"):
        assert needle in prompt, needle
    assert cleaned == ["I like building.", "Earn by writing docs.", "Welcome!"]
    later = system_prompt(IDENTITY, STATUS, TOOLS, soul=None, genesis=None, constitution="C", creator_message="Welcome!",
                          first_run=False, clean=str)
    assert "Welcome!" not in later


def test_long_soul_is_bounded() -> None:
    prompt = system_prompt(IDENTITY, STATUS, [], soul="s" * 9000, genesis=None, constitution=None, creator_message=None,
                           first_run=False, clean=str)
    assert "[... 4000 characters not shown]" in prompt


def test_wakeup_says_why() -> None:
    first = wakeup_message(first_run=True, reason="you were just created", credits_cents=500, usdc_atomic=None, turns=0)
    assert "first turn" in first and "Why you are awake: you were just created." in first and "$5.00" in first
    later = wakeup_message(first_run=False, reason="a message arrived from 0xabc", credits_cents=None, usdc_atomic=1_000_000,
                           turns=12, recent_thoughts=["a", "", "b", "c", "d"])
    assert "after 12 turns" in later and "a message arrived" in later and "unknown in credits" in later
    assert "- b" in later and "- d" in later and "- a" not in later


def test_turn_retention_keeps_the_newest(db) -> None:
    with db.transaction():
        for n in range(10):
            insert_turn(db, turn(n))
    assert prune_turns(db, keep_latest=3) == 7
    assert [t.id for t in recent_turns(db, 10)] == ["T0007", "T0008", "T0009"] and count_turns(db) == 3
    assert db.scalar("SELECT COUNT(*) FROM tool_calls") == 3


def _b64(n: int, size: int) -> str:
    return base64.b64encode(hashlib.shake_256(str(n).encode()).digest(size)).decode()


def _exact_size(messages) -> int:
    return sum(count_tokens(m.content) + 4 + sum(count_tokens(c.name) + count_tokens(str(c.arguments)) for c in m.tool_calls)
               for m in messages)


def test_base64_tool_results_are_trimmed_to_the_exact_count() -> None:
    turns = [StoredTurn(f"T{n}", to_iso(n), "running", None, None, "",
                        (StoredToolCall(f"T{n}_0", "exec", {"command": "cat blob"}, _b64(n, 2250), None),))
             for n in range(5)]
    chars4 = sum(len(_b64(n, 2250)) // 4 + 20 for n in range(5))
    assert chars4 < 4500  # characters/4 would keep all five turns
    messages = build_messages("S", turns, None, budget_tokens=4500)
    kept = [m for m in messages if m.role == "tool"]
    assert 0 < len(kept) < 5 and kept[-1].content == _b64(4, 2250)
    assert _exact_size(messages) <= 4500


def test_a_small_context_makes_no_exact_count() -> None:
    counter = TokenCounter()
    messages = build_messages("S", [turn(n) for n in range(5)], Message("user", "[wakeup] hi"), budget_tokens=10_000,
                              counter=counter)
    assert len(messages) == 12 and not counter.loaded  # all of it, on the estimate alone
    build_messages("S" * 30_000, [turn(1)], None, budget_tokens=10_000, counter=counter)  # over 70%: exact
    assert counter.loaded

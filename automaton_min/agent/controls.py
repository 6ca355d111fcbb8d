"""Loop controls: after each turn, go on, warn the model, or sleep (the reference's constants; README: The agent). Every
sleep carries its duration, so the loop always writes ``sleep_until`` (the reference sometimes forgot, and lost its
warning message when it forced a sleep).

A loop is told by what the calls are and what they return, not by the tools' names (the seed's literal rule, which
took six different commands in a row for a loop): a turn repeats when none of its calls brings anything new.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

MAX_TOOL_CALLS_PER_TURN = 10
MAX_CONSECUTIVE_ERRORS = 5
ERROR_SLEEP_S = 300
TEXT_ONLY_SLEEP_S = 60
CYCLE_LIMIT_SLEEP_S = 120
IDLE_TURN_LIMIT = 10
IDLE_SLEEP_S = 60
IDLE_BACKOFF_MAX_S = 3600  # a sleep a control chose, doubled for each such cycle in a row with no new input
REPEATS_BEFORE_WARNING = 2  # turns in a row that brought nothing new: the third time is warned
LOOP_ENFORCEMENT_SLEEP_S = 300
MAINTENANCE_TURNS = 3


def call_key(name: str, arguments: dict[str, Any]) -> str:
    """A call's identity for the repeat rule: the tool and its arguments, key order aside."""
    return name + json.dumps(arguments, sort_keys=True, default=str)  # json: integers of any size


@dataclass(frozen=True)
class CallSeen:
    """One call as the loop rule sees it: what was asked, a digest of what came back, and whether it only reads
    (a tool that changes nothing: the same result from another of its calls is nothing new either)."""

    tool: str
    key: str
    result: str
    reads_only: bool = False

    @classmethod
    def of(cls, name: str, arguments: dict[str, Any], result: str, *, reads_only: bool) -> "CallSeen":
        digest = hashlib.blake2b(result.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
        return cls(name, call_key(name, arguments), digest, reads_only)


@dataclass(frozen=True)
class TurnSummary:
    """What the controls need to know about a finished turn."""

    tool_names: tuple[str, ...]
    mutated: bool
    status_only: bool
    sleep_requested_s: int | None = None
    sleep_reason: str = ""
    had_input: bool = False
    succeeded: frozenset[str] = frozenset()  # call_key of each call that succeeded
    repeated: bool = False  # every call was one the previous turn made and it succeeded: none of them ran
    calls: tuple[CallSeen, ...] = ()  # what the loop rule compares
    no_tool_retry: bool = False  # a text answer while the action mode is learnt: ask again at once, no sleep


@dataclass(frozen=True)
class Verdict:
    """``go`` (next turn), ``warn`` (next turn, with ``message`` for the model) or ``sleep`` (for ``seconds``);
    ``idle``: a sleep because the agent did nothing (no tool, or nothing changed), not one it or a limit chose."""

    action: str
    seconds: int = 0
    reason: str = ""
    message: str = ""
    idle: bool = False
    forced: bool = False  # a control chose this sleep, not the agent nor a failure

    def ending(self) -> dict[str, Any]:
        """How the turn this verdict follows ended, as ``turns.ending`` records it."""
        if self.action == "sleep":
            return {"ended": "idle" if self.idle else "slept", "seconds": self.seconds, "reason": self.reason}
        if self.action == "warn":
            return {"ended": "warned", "reason": self.message}
        return {"ended": "went on"}


@dataclass
class LoopControls:
    max_turns_per_cycle: int = 25
    turns: int = 0
    errors: int = 0
    idle_turns: int = 0
    maintenance_turns: int = 0
    asked: set[tuple[str, str]] = field(default_factory=set)  # this cycle's (call, result) pairs
    read: set[tuple[str, str]] = field(default_factory=set)  # and its read-only tools' (tool, result) pairs
    repeats: int = 0  # turns in a row whose calls brought nothing new
    warned: bool = False  # the model was told it repeats; one more repeat and it sleeps
    last_succeeded: frozenset[str] = frozenset()
    backoff: int = 0  # cycles in a row, before this one, that a control put to sleep with no new input

    def _forced(self, seconds: int, reason: str, *, idle: bool = False) -> Verdict:
        return Verdict("sleep", min(seconds << self.backoff, max(seconds, IDLE_BACKOFF_MAX_S)), reason, idle=idle,
                       forced=True)

    def is_repeat(self, key: str) -> bool:
        """A call exactly like one that succeeded in the previous turn (``call_key``). The loop asks only for a
        small model's turns (``agent/stepwise.py``): at temperature 0 one that made a call twice makes it for ever,
        whereas a large model is warned about repeats first (below)."""
        return key in self.last_succeeded

    def after_turn(self, turn: TurnSummary) -> Verdict:
        """The verdict after a turn that completed (errors go to ``after_error``)."""
        self.turns += 1
        self.errors = 0
        self.last_succeeded = turn.succeeded
        if turn.repeated:
            return self._forced(IDLE_SLEEP_S, "repeated its last call, which had succeeded: nothing new to do",
                                idle=True)
        if turn.sleep_requested_s is not None:
            return Verdict("sleep", turn.sleep_requested_s, turn.sleep_reason or "the agent chose to sleep")
        if not turn.tool_names:
            if turn.no_tool_retry:
                return Verdict("go")
            return self._forced(TEXT_ONLY_SLEEP_S, "answered without using a tool", idle=True)

        repeating = self._nothing_new(turn.calls)
        if not repeating:
            self.repeats, self.warned = 0, False
        elif self.warned:
            self.repeats, self.warned = 0, False
            return self._forced(LOOP_ENFORCEMENT_SLEEP_S,
                                f"kept repeating {_names(turn.calls)} after a warning: nothing new came back")
        else:
            self.repeats += 1

        self.idle_turns = 0 if (turn.mutated or turn.had_input) else self.idle_turns + 1
        self.maintenance_turns = self.maintenance_turns + 1 if turn.status_only else 0
        if self.turns >= self.max_turns_per_cycle:
            return self._forced(CYCLE_LIMIT_SLEEP_S, f"reached {self.max_turns_per_cycle} turns in this wake cycle")
        if self.idle_turns >= IDLE_TURN_LIMIT:
            self.idle_turns = 0
            return self._forced(IDLE_SLEEP_S, f"{IDLE_TURN_LIMIT} turns in a row changed nothing", idle=True)
        if self.repeats >= REPEATS_BEFORE_WARNING:
            self.repeats, self.warned = 0, True
            return Verdict("warn", message=(
                f"Your last {REPEATS_BEFORE_WARNING + 1} turns made calls ({_names(turn.calls)}) that brought "
                "nothing new: the same calls with the same results. Do something different now: pick one concrete "
                "task from your purpose and carry it out. Repeating them again will put you to sleep."))
        if self.maintenance_turns >= MAINTENANCE_TURNS:
            self.maintenance_turns = 0
            return Verdict("warn", message=(
                f"Your last {MAINTENANCE_TURNS} turns only checked status. You already know where you stand. "
                "Go back to your purpose and your SOUL.md and build or change something concrete."))
        return Verdict("go")

    def _nothing_new(self, calls: tuple[CallSeen, ...]) -> bool:
        """Whether every call came back as it did earlier in this cycle: the same call with the same result, or, for
        a tool that only reads, the same result from any of its calls. Then remembers them."""
        repeating = bool(calls) and all((call.key, call.result) in self.asked
                                        or (call.reads_only and (call.tool, call.result) in self.read)
                                        for call in calls)
        self.asked.update((call.key, call.result) for call in calls)
        self.read.update((call.tool, call.result) for call in calls if call.reads_only)
        return repeating

    def after_error(self) -> Verdict:
        """The verdict after a turn that failed (provider error, crash outside a tool)."""
        self.errors += 1
        if self.errors >= MAX_CONSECUTIVE_ERRORS:
            self.errors = 0
            return Verdict("sleep", ERROR_SLEEP_S, f"{MAX_CONSECUTIVE_ERRORS} turns failed in a row")
        return Verdict("go")


def _names(calls: tuple[CallSeen, ...]) -> str:
    return ", ".join(dict.fromkeys(call.tool for call in calls)) or "no call"

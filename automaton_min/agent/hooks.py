"""The loop's collaborators, backed by the real stores, the policy, the key guard and the injection defence."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import orjson

from automaton_min.agent.key_guard import KeyGuard
from automaton_min.agent.states import read_agent_state, set_agent_state
from automaton_min.agent.survival import FinancialCache, FinancialReading, assess
from automaton_min.agent.tools.base import ToolSpec
from automaton_min.agent.tools.loop_control import LOW_COMPUTE_KEY
from automaton_min.clock import Clock, to_iso
from automaton_min.config import Config
from automaton_min.errors import AutomatonError
from automaton_min.home import Home
from automaton_min.log import get_logger, short
from automaton_min.memory.ingest import ingest_turn
from automaton_min.observe.metrics import NO_METRICS, Metrics
from automaton_min.store import inbox
from automaton_min.store.db import Database
from automaton_min.store.kv import USDC_KEY, epoch_ms, get_value, set_json, set_value
from automaton_min.store.turns import StoredToolCall, StoredTurn
from automaton_min.treasury.topup import INLINE_TOPUP_COOLDOWN_MS, TOPUP_ATTEMPT_KEY

log = get_logger(__name__)
run_log = get_logger("run")  # the tool-call lines a person watching the run reads

ARGUMENTS_CHARS = 80
ERROR_CHARS = 120
KEY_MATERIAL = "KEY_MATERIAL"  # the refusal of a tool call whose arguments hold wallet key material
SIGNED_CREATOR = "your creator, signed"  # a message's label notes who its sender proved to be
UNSIGNED_CREATOR = "unsigned: not verified as your creator"  # the creator's address claimed without its signature


class AgentHooks:
    """The loop's collaborators, backed by the real stores, policy and injection defence."""

    def __init__(self, db: Database, config: Config, home: Home, *, now: Clock, finances: FinancialCache | None,
                 policy: Any = None, topup: Any = None, key_guard: KeyGuard | None = None,
                 metrics: Metrics = NO_METRICS) -> None:
        self.db, self.config, self.home, self.now = db, config, home, now
        self.key_guard = key_guard
        self.financial = finances
        self.policy = policy
        self.topup = topup
        self.metrics = metrics
        self.previous_tier: str | None = None
        self.remembered_usdc: int | None = None
        self.inbox_senders: list[str] = []
        self.inbox_signers: list[str] = []
        self.creator_wrote = False

    # -- inbox
    def claim_inbox(self, now_ms: int, *, creator_only: bool = False) -> list[tuple[str, str, str]]:
        """Messages to read, with their authority: the creator's signed ones first, alone (read beside an
        outsider's, the creator's order would be answered as an outsider's); ``creator_only``: only those."""
        from automaton_min.social.intake import authority_for  # creator only for the creator's verified signature

        from automaton_min.social.injection import noted_sender

        creator = self.config.get("creatorAddress")
        if creator_only and not creator:
            return []
        claimed = inbox.claim(self.db, inbox.CLAIM_BATCH, now_ms=now_ms, signed_by=creator) if creator else []
        if not claimed and not creator_only:
            claimed = inbox.claim(self.db, inbox.CLAIM_BATCH, now_ms=now_ms)
        read = [(m.id, m.content, authority_for(m.signed_by, creator)) for m in claimed]
        read = [(ident, noted_sender(content, SIGNED_CREATOR) if authority == "creator"
                 else noted_sender(content, UNSIGNED_CREATOR) if creator and m.from_address.lower() == creator.lower()
                 else content, authority) for (ident, content, authority), m in zip(read, claimed)]
        self.inbox_senders = [m.from_address for m in claimed]  # for memory ingestion of the turn that reads them
        self.inbox_signers = [m.signed_by for m in claimed if m.signed_by]  # the senders a signature proved
        self.creator_wrote = any(authority == "creator" for _, _, authority in read)  # a verified signature
        return read

    def ack_inbox(self, ids: list[str], now_ms: int) -> None:
        inbox.mark_processed(self.db, ids, now_ms)

    def release_inbox(self, ids: list[str]) -> None:
        if ids:
            inbox.release_after_failed_turn(self.db, ids)

    def return_inbox(self, ids: list[str]) -> None:
        if ids:
            inbox.return_unread(self.db, ids)

    # -- money and survival
    def finances(self, now_ms: int) -> FinancialReading:
        if self.financial is None:  # no Conway key: credits do not apply to this agent
            return FinancialReading(None, False, None)
        reading = self.financial.reading()
        self.metrics.balances(reading.credits_cents, reading.usdc_atomic)
        self._remember_usdc(reading.usdc_atomic, now_ms)
        return reading

    def _remember_usdc(self, atomic: int | None, now_ms: int) -> None:
        """Keep the last USDC balance read in KV ``last_known_usdc`` for ``status`` (written when it changes)."""
        if atomic is None or atomic == self.remembered_usdc:
            return
        set_json(self.db, USDC_KEY, {"atomic": atomic, "at": to_iso(now_ms)}, now_ms)
        self.remembered_usdc = atomic

    def survive(self, reading: FinancialReading, now_ms: int) -> tuple[str, bool]:
        chosen_low = get_value(self.db, LOW_COMPUTE_KEY) is not None  # the agent asked for it (enter_low_compute)
        if self.financial is None:
            return "normal", chosen_low
        state = read_agent_state(self.db)
        assessment = assess(reading, self.previous_tier, state)
        self.previous_tier = assessment.tier
        if assessment.state_to_enter and assessment.state_to_enter != state:
            set_agent_state(self.db, assessment.state_to_enter, now_ms, reason=f"tier {assessment.tier}",
                            funded=assessment.funding_arrived)
        if assessment.should_try_topup:
            self.try_topup(reading, now_ms)
        return assessment.tier, assessment.low_compute or chosen_low

    def try_topup(self, reading: FinancialReading, now_ms: int) -> bool:
        """The inline $5 top-up, at most once per ``INLINE_TOPUP_COOLDOWN_MS``; True when one was attempted.

        A failure is logged, not raised: the loop goes on, and the next reading tells.
        """
        if self.topup is None or self.financial is None:
            return False
        last = epoch_ms(get_value(self.db, TOPUP_ATTEMPT_KEY))
        if last is not None and now_ms - last < INLINE_TOPUP_COOLDOWN_MS:
            return False
        set_value(self.db, TOPUP_ATTEMPT_KEY, to_iso(now_ms), now_ms)
        try:
            self.topup(reading)
        except AutomatonError as exc:  # refused, not answered, no node: nothing more to do this time
            log.warning("inline top-up failed", extra={"error": str(exc)})
        self.financial.invalidate()
        return True

    def begin_cycle(self, reason: str, now_ms: int) -> bool:
        if read_agent_state(self.db) == "dead":
            reading = self.finances(now_ms)
            assessment = assess(reading, "dead", "dead")
            if not assessment.funding_arrived and assessment.should_try_topup and self.try_topup(reading, now_ms):
                assessment = assess(self.finances(now_ms), "dead", "dead")  # did the top-up fund it?
            if not assessment.funding_arrived:
                return False
            set_agent_state(self.db, "waking", now_ms, reason="funding arrived", funded=True)
            return True
        set_agent_state(self.db, "waking", now_ms, reason=reason)
        return True

    def set_state(self, state: str, now_ms: int, reason: str) -> None:
        set_agent_state(self.db, state, now_ms, reason=reason)

    def state(self) -> str:
        return read_agent_state(self.db)

    # -- policy and sanitizing
    def authorize(self, spec: ToolSpec, arguments: dict[str, Any], authority: str, turn_id: str,
                  calls_this_turn: tuple[str, ...]) -> str | None:
        if self.key_guard is not None and self.key_guard.in_arguments(arguments):
            log.warning("refused a tool call carrying wallet key material", extra={"tool": spec.name})
            return (f"{KEY_MATERIAL}: the arguments carry wallet key material, which never leaves the agent "
                    "through any tool")
        if self.policy is None:
            return None
        return self.policy.authorize(spec, arguments, authority, turn_id, calls_this_turn)

    def clean_result(self, text: str, source: str, now_ms: int) -> str:
        """Key material scrubbed first (a second line behind confinement), then the injection defence."""
        from automaton_min.social.injection import sanitize

        if self.key_guard is not None:
            text = self.key_guard.scrub(text)
        return sanitize(text, source, "tool_result", now_ms=now_ms).content

    def redact_key(self, value: Any) -> Any:
        """Key material out of what the model wrote (its text, its calls' arguments) before it is stored: a model
        that got the key must not find it in its own history, and ``state.db`` must not hold it."""
        return self.key_guard.redact(value) if self.key_guard is not None else value

    def clean_instruction(self, text: str) -> str:
        from automaton_min.social.injection import sanitize

        return sanitize(text, "self", "instruction", now_ms=self.now()).content

    def after_turn(self, turn: StoredTurn) -> None:
        """After a turn is committed: one log line per tool call, then memory ingestion."""
        for call in turn.tool_calls:
            log_tool_call(call, self.key_guard.scrub if self.key_guard else None)
        creator = self.config.get("creatorAddress") if self.creator_wrote else None
        ingest_turn(self.db, turn, self.now, source=turn.input_source, sender=self.inbox_senders, creator=creator,
                    signers=self.inbox_signers)

    def prompt_parts(self) -> dict[str, str | None]:
        def read(path: Path) -> str | None:
            try:
                return path.read_text(encoding="utf-8")
            except OSError:
                return None

        return {"soul": read(self.home.soul_path), "constitution": read(self.home.constitution_path),
                "genesis": self.config.get("genesisPrompt"), "creator_message": self.config.get("creatorMessage")}


def log_tool_call(call: StoredToolCall, scrub: Callable[[str], str] | None = None) -> None:
    """One line: the tool, its arguments (cut short), ok or the error, and how long it took.

    ``scrub`` (the key guard's) cleans the arguments first: a model that somehow holds the key writes it into a
    call's arguments in any spelling, and the log's own scrubber knows only the key's exact forms."""
    text = orjson.dumps(call.arguments).decode()
    arguments = short(scrub(text) if scrub else text, ARGUMENTS_CHARS)
    outcome = "ok" if call.error is None else "error: " + short(call.error, ERROR_CHARS)
    run_log.info(f"tool {call.name} {outcome} ({call.duration_ms} ms)",
             extra={"tool": call.name, "arguments": arguments, "ok": call.error is None,
                    "durationMs": call.duration_ms})

"""The agent loop: wake cycles of turns (README: The agent).

A configuration error (``UserError``, e.g. no provider can serve the model) is not a failed turn: it ends the cycle
and reaches the CLI, which exits 2 with the fix.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from automaton_min.agent.action_mode import ActionMode, ActionModes
from automaton_min.agent.context import AssembledContext
from automaton_min.agent import stepwise
from automaton_min.agent.hooks import AgentHooks
from automaton_min.agent.controls import (MAX_TOOL_CALLS_PER_TURN, CallSeen, LoopControls, TurnSummary, Verdict,
                                          call_key)
from automaton_min.agent.open_turn import OpenTurns
from automaton_min.agent.prompts import Identity, Status, creator_note, status_block, system_prompt, wakeup_message
from automaton_min.agent.tools.base import ToolContext
from automaton_min.agent.tools.registry import ToolOutcome, ToolRegistry
from automaton_min.agent.tools.services import ToolServices
from automaton_min.agent.toolset import is_compact, offered_tools
from automaton_min.agent.turn_context import TurnContextBuilder
from automaton_min.clock import Clock, to_iso
from automaton_min.errors import RuntimeFailure, UserError
from automaton_min.goals.todo import next_task
from automaton_min.store.goals import active_goal_origin
from automaton_min.ids import new_ulid
from automaton_min.inference.router import BudgetDenied, RoutedResult, Route, Router, tools_text, worst_case_tokens
from automaton_min.inference.types import ContextTooLong, InferenceError, Message, ToolSchema
from automaton_min.memory.compression import HistoryFolder
from automaton_min.memory.retrieval import MemoryBudget, MemoryRetriever
from automaton_min.memory.tokens import estimate_tokens
from automaton_min.social.injection import one_line
from automaton_min.log import get_logger, scrub
from automaton_min.observe.metrics import NO_METRICS, Metrics
from automaton_min.crashpoint import crash_point
from automaton_min.store.db import STORAGE_ERRORS
from automaton_min.store.inbox import waiting as inbox_waiting
from automaton_min.store.kv import delete_value, get_value, set_json, set_value
from automaton_min.store.wake import woken_since
from automaton_min.store.turns import (StoredToolCall, StoredTurn, count_turns, insert_failed_turn, insert_turn,
                                      recent_turns)

log = get_logger(__name__)

SLEEP_UNTIL_KEY = "sleep_until"
OWN_CYCLE_OWED_KEY = "own_cycle_owed"  # set when a cycle read an outsider's message: the next is the agent's own
OWED_SLEEP_S = 30  # the own cycle's sleep when outsiders' messages wait for the next
INBOX_BATCH = 10
FIRST_MESSAGE_LABEL = "[Message from your creator (given at setup)]:"
OWNER_WAKE_LABEL = "[Your owner, waking you (automaton-min wake)]:"
STEP_FRAME_TOKENS = 400  # what a step adds around its input: the table of actions, or the worked examples
DEAD_WAIT_S = 300

class TurnAbandoned(Exception):
    """A turn still running when the stop's grace period ran out: nothing of it is written."""


@dataclass
class CycleResult:
    turns: int = 0
    slept_for_s: int = 0
    reason: str = ""


@dataclass
class LoopState:
    """Per-cycle state a tool may change through the ``loop`` service."""

    sleep_request: tuple[int, str] | None = None
    low_compute: bool = False
    distress: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    tier: str = "normal"  # this turn's survival tier (the planner's model is picked for it)

    def request_sleep(self, seconds: int, reason: str) -> None:
        self.sleep_request = (seconds, reason)


class AgentLoop:
    def __init__(self, db: Any, config: Any, identity: Identity, router: Router, tools: ToolRegistry,
                 hooks: AgentHooks, *,
                 now: Clock, services: ToolServices | None = None, started_ms: int | None = None,
                 metrics: Metrics = NO_METRICS, context: TurnContextBuilder | None = None,
                 progress: Callable[[], None] | None = None) -> None:
        self.db = db
        self.config = config
        self.identity = identity
        self.router = router
        self.tools = tools
        self.hooks = hooks
        self.now = now
        self.services = services or ToolServices()
        self.metrics = metrics
        if context is None:
            retriever = MemoryRetriever(db, now, MemoryBudget.from_config(config), line=one_line)
            context = TurnContextBuilder(db, now, router, retriever, HistoryFolder(db, now))
        self.context = context
        self.started_ms = started_ms if started_ms is not None else now()
        self.open_turns = OpenTurns(db)
        self._uncommitted: str | None = None  # the id of the turn under way until its commit
        self._uncommitted_at: int | None = None  # and when it started
        self._stop: threading.Event | None = None  # the cycle's stop: no new turn starts once it is set
        self._abandon: threading.Event | None = None  # set when a stopping turn ran out of time: cut it off
        self._previous_action: str | None = None  # this cycle's last call and its result, for a small model
        # what the owner typed into `automaton-min wake` for the next cycle (the runtime sets it as it takes the
        # wake events): a direct turn reads it in the wake-up note; a small model's first stepwise turn of the cycle
        # shows it as a message (also when the cycle began in direct mode and the model then proved small)
        self.owner_words: list[str] = []
        self._owner_words_shown = False  # the step being built shows them
        self.modes = ActionModes(db, config, now)
        self._mode: ActionMode | None = None  # how the turn under way asked the model to act
        self.last_inbox_check_ms: int | None = None  # when the loop last claimed inbox messages (wake events use it)
        self.last_context: AssembledContext | None = None  # the last turn's context (its figures go with the turn)
        self._forced_cycles, self._forced_sleep_at = 0, None  # a control's sleeps back off: see LoopControls
        self.progress = progress or (lambda: None)  # a sign of life for the watchdog, before each step of a turn

    # ---------------------------------------------------------------- one wake cycle

    def run_cycle(self, reason: str, stop: threading.Event | None = None,
                  abandon: threading.Event | None = None) -> CycleResult:
        """Run turns until a control (or ``stop``) says to sleep; returns what happened.

        After ``stop`` the turn under way may finish; once ``abandon`` is set too, a wait for the model ends at
        once and the turn is rolled back (its messages go back to the inbox). Without ``abandon``, ``stop``
        does both. A turn that fails after ``stop`` (a stop cuts HTTP calls and their retries) is rolled back
        the same way, not counted as a failure."""
        stop = stop or threading.Event()
        self._stop = stop
        self._abandon = abandon or stop
        now_ms = self.now()
        # the least-trusted input this cycle has answered, its later turns too. A cycle begins as the agent's own:
        # what an earlier one did for outsiders reaches it as one line a turn (turn_context.py), so no stranger's
        # order waits in the context for a nap to end, and no stranger holds the agent's own work.
        carried = "agent"
        # after a cycle that answered outsiders, one of the agent's own: their messages wait for the next, so a
        # stranger who keeps writing has every other cycle at most
        owed = get_value(self.db, OWN_CYCLE_OWED_KEY) is not None
        if owed:
            delete_value(self.db, OWN_CYCLE_OWED_KEY)
        delete_value(self.db, SLEEP_UNTIL_KEY)
        if not self.hooks.begin_cycle(reason, now_ms):
            self._sleep(DEAD_WAIT_S, "dead: no credits; waiting for funding", enter_state=False)
            return CycleResult(0, DEAD_WAIT_S, "dead: waiting for funding")
        reading = self.hooks.finances(now_ms)
        credits, usdc = reading.credits_cents, reading.usdc_atomic
        first_run = count_turns(self.db) == 0
        thoughts = [t.thinking for t in recent_turns(self.db, 3) if not t.external]
        pending: tuple[Message, str, str] | None = (
            Message("user", "[wakeup] " + wakeup_message(first_run=first_run, reason=reason, credits_cents=credits,
                                                          usdc_atomic=usdc, turns=count_turns(self.db),
                                                          recent_thoughts=thoughts)),
            "wakeup", carried)
        self.hooks.set_state("running", self.now(), "awake")
        fresh = self._forced_sleep_at is None or woken_since(self.db, self._forced_sleep_at)
        controls = LoopControls(max_turns_per_cycle=int(self.config.get("maxTurnsPerCycle") or 25),
                                backoff=0 if fresh else self._forced_cycles)
        self._previous_action = None
        result = CycleResult()
        while not stop.is_set():
            claimed: list[str] = []
            wake_note: str | None = None
            if pending is None or pending[1] == "wakeup":  # the messages that woke the agent come with the wake-up
                self.last_inbox_check_ms = self.now()
                messages = self.hooks.claim_inbox(self.last_inbox_check_ms, creator_only=owed)
                claimed = [m[0] for m in messages]
                if messages:
                    controls.backoff = 0  # new input: a control's sleep starts short again
                    external = any(m[2] != "creator" for m in messages) or (result.turns > 0 and carried == "external")
                    carried = "external" if external else "agent"  # the creator's messages: as the agent's own
                    if pending is not None:  # the wake-up note goes with the turn's notes; its input is the messages
                        wake_note = pending[0].content
                    pending = (Message("user", "\n\n".join(m[1] for m in messages)), "inbox", carried)
            try:
                verdict = self._turn(pending, claimed, first_run and result.turns == 0, carried, wake_note,
                                     controls=controls)
            except UserError:  # a configuration no turn can work with (no usable model): stop with the fix
                self.hooks.return_inbox(claimed)  # the model never read them: no try counted
                raise
            except Exception as exc:  # the loop's outer boundary: a failed turn is logged, counted, and undone
                cut = isinstance(exc, (InferenceError, RuntimeFailure)) and stop.is_set()  # its calls end at a stop
                if isinstance(exc, TurnAbandoned) or self._abandon.is_set() or cut:  # cut off by a stop, not a failure
                    self.hooks.return_inbox(claimed)
                    log.info("turn abandoned: the runtime is stopping", extra={"returned_messages": len(claimed)})
                    break
                failed = (self._uncommitted, self._uncommitted_at if self._uncommitted else None)
                if self._uncommitted is not None:  # its retry replays it under the same id
                    self.open_turns.failed(self._uncommitted, claimed)
                    self._uncommitted = None
                if isinstance(exc, STORAGE_ERRORS):  # nothing more can be written: the daemon waits for space
                    raise
                if isinstance(exc, (InferenceError, RuntimeFailure)):
                    log.warning("turn failed", extra={"error": str(exc)})
                else:
                    log.exception("turn crashed")
                self.hooks.release_inbox(claimed)
                self.metrics.turn_failed()
                verdict = controls.after_error()
                self._record_failure(*failed, pending[1] if pending else None,
                                     scrub(str(exc) or type(exc).__name__)[:500], verdict)
            pending = None
            result.turns += 1
            if verdict.action == "warn":
                pending = (Message("user", "[system] " + verdict.message), "system", carried)
            elif verdict.action == "sleep":
                self._forced_cycles = controls.backoff + 1 if verdict.forced else 0
                self._forced_sleep_at = to_iso(self.now()) if verdict.forced else None
                waiting = owed and inbox_waiting(self.db)  # the outsiders' turn comes next, soon
                seconds = min(verdict.seconds, OWED_SLEEP_S) if waiting else verdict.seconds
                self._sleep(seconds, verdict.reason)
                result.slept_for_s, result.reason = seconds, verdict.reason
                break
        return result

    def _record_failure(self, turn_id: str | None, started_ms: int | None, source: str | None, error: str,
                        verdict: Verdict) -> None:
        """KV ``last_error``, and the failed turn (at its start, as turns are) with its error and the sleep that
        follows, if any, for ``logs``."""
        now_ms = self.now()
        ending = {"ended": "failed", "error": error}
        if verdict.action == "sleep":
            ending.update(seconds=verdict.seconds, reason=verdict.reason)
        failure_id = new_ulid(now_ms)
        with self.db.transaction():
            set_json(self.db, "last_error", {"message": error, "at": to_iso(now_ms)}, now_ms)
            insert_failed_turn(self.db, failure_id, turn_id or failure_id, to_iso(started_ms or now_ms),
                               self.hooks.state(), source, ending)

    def _sleep(self, seconds: int, reason: str, *, enter_state: bool = True) -> None:
        """Sleep ``seconds``: the time is kept, so a restart knows it was asleep."""
        now_ms = self.now()
        with self.db.transaction():
            set_value(self.db, SLEEP_UNTIL_KEY, to_iso(now_ms + seconds * 1000), now_ms)
        if enter_state and self.hooks.state() != "dead":  # dead is left only when funding arrives
            self.hooks.set_state("sleeping", now_ms, reason)
        log.info("sleeping", extra={"seconds": seconds, "reason": reason})

    # ---------------------------------------------------------------- one turn

    def _turn(self, pending: tuple[Message, str, str] | None, claimed: list[str], first_run: bool,
              answering: str = "agent", wake_note: str | None = None, *, controls: LoopControls) -> Verdict:
        """One turn and the controls' verdict on it, which the turn records as its ending; with no new input it
        answers with ``answering``, the authority of what the cycle carries. ``wake_note``: the wake-up message,
        when the turn's input is the messages that woke the agent."""
        self.progress()
        self._mode = None
        now_ms = self.now()
        turn_id = self._uncommitted = self.open_turns.start(claimed, now_ms)
        self._uncommitted_at = now_ms
        reading = self.hooks.finances(now_ms)
        credits, usdc = reading.credits_cents, reading.usdc_atomic
        tier, low_compute = self.hooks.survive(reading, now_ms)
        loop_state = LoopState(low_compute=low_compute, tier=tier)
        route = self.router.plan(tier, low_compute=loop_state.low_compute)
        message, source, authority = pending if pending else (None, None, answering)
        status = Status(self.hooks.state(), tier, credits, usdc, count_turns(self.db),
                        (now_ms - self.started_ms) // 1000,
                        route.model.model_id if not isinstance(route, BudgetDenied) else "none")
        routed = (route if isinstance(route, BudgetDenied)
                  else self._infer(route, status, message, first_run, tier, turn_id, wake_note, source,
                             outsiders=authority == "external"))
        if isinstance(routed, BudgetDenied):
            # The model never saw the input: claimed messages go back to the inbox as they were (not processed,
            # no try counted), so the turn does not record them as its input either.
            unread = bool(claimed)
            verdict = Verdict("sleep", 600, f"inference not allowed: {routed.limit}")
            self._persist(StoredTurn(turn_id, to_iso(now_ms), self.hooks.state(),
                                     None if unread or not message else message.content, None if unread else source,
                                     f"[no inference: {routed.message}]",
                                     ending={"ended": "refused", "seconds": verdict.seconds,
                                             "reason": f"{routed.limit}: {routed.message}"}), [])
            if unread:
                self.hooks.return_inbox(claimed)
            return verdict

        outcomes: list[ToolOutcome] = []
        ctx = ToolContext(self.db, self.config, self.now, turn_id, authority, self.services.for_turn(loop_state))
        repeats = 0
        mode = self._mode
        # the repeat rule: a small model's turn without new input (a message may ask for the same call again)
        small = message is None and mode is not None and mode.stepwise
        for index, call in enumerate(routed.result.tool_calls[:MAX_TOOL_CALLS_PER_TURN]):
            self.progress()
            if small and call.argument_error is None and controls.is_repeat(call_key(call.name, call.arguments)):
                repeats += 1
                outcomes.append(ToolOutcome(call.id, call.name, call.arguments, "",
                                            "not run: the same call as your last turn's, which succeeded", 0))
                continue
            names = tuple(o.name for o in outcomes)
            outcome = self.tools.execute(
                replace(ctx, call_index=index), call.id, call.name, call.arguments, argument_error=call.argument_error,
                authorize=lambda spec, args, n=names: self.hooks.authorize(spec, args, authority, turn_id, n))
            outcomes.append(outcome)
        calls = tuple(
            StoredToolCall(f"{turn_id}_{i}", o.name, self.hooks.redact_key(o.arguments),
                           self.hooks.clean_result(o.result, o.name, self.now()) if o.result else "",
                           self.hooks.clean_result(o.error, o.name, self.now()) if o.error else o.error, o.duration_ms,
                           routed.result.tool_calls[i].id)
            for i, o in enumerate(outcomes))
        if calls:  # as stored: cleaned of injections and key material, like anything the model reads
            self._previous_action = stepwise.done(calls[-1].name, calls[-1].result, calls[-1].error)
        if self._abandon is not None and self._abandon.is_set():
            raise TurnAbandoned()
        specs = {spec.name: spec for spec in self.tools.specs()}
        ran = [o for o in outcomes if o.ok]
        sleep = loop_state.sleep_request
        learning = mode is not None and mode.learning and source != "inbox"
        if mode is not None and mode.learning:  # a small window's first answers: can this model call a tool?
            called = any(c.argument_error is None and c.name in specs for c in routed.result.tool_calls)
            self.modes.after_answer(routed.route.model.model_id, mode, called_a_tool=called,
                                    answered_a_message=source == "inbox")
            learning = learning and not called
        verdict = controls.after_turn(TurnSummary(
            tool_names=tuple(o.name for o in outcomes),
            mutated=any(specs[o.name].mutating for o in ran if o.name in specs),
            status_only=bool(outcomes) and all(o.name in specs and specs[o.name].status_check for o in outcomes),
            sleep_requested_s=sleep[0] if sleep else None,
            sleep_reason=sleep[1] if sleep else "",
            had_input=message is not None,
            succeeded=frozenset(call_key(o.name, o.arguments) for o in ran),
            repeated=bool(outcomes) and repeats == len(outcomes),
            calls=tuple(CallSeen.of(o.name, o.arguments, o.result if o.ok else f"error: {o.error}",
                                    reads_only=o.name in specs and not specs[o.name].mutating) for o in outcomes),
            no_tool_retry=learning,
        ))
        stopping = verdict.action != "sleep" and self._stop is not None and self._stop.is_set()
        turn = StoredTurn(turn_id, to_iso(now_ms), self.hooks.state(), message.content if message else None, source,
                          self.hooks.redact_key(routed.result.content), calls,
                          {"promptTokens": routed.input_tokens, "completionTokens": routed.output_tokens,
                           "totalTokens": routed.input_tokens + routed.output_tokens, **self._context_figures()},
                          routed.cost_cents,
                          {"ended": "stopped", "reason": "the runtime is stopping"} if stopping else verdict.ending())
        if authority == "external":  # what it read and did stays with the turns that answer outsiders
            turn = replace(turn, ending={**(turn.ending or {}), "authority": "external"})
        self._persist(turn, claimed)
        self.hooks.after_turn(turn)
        self.metrics.turn(turn)
        return verdict

    def _infer(self, route: Route, status: Status, message: Message | None, first_run: bool, tier: str,
               turn_id: str, wake_note: str | None = None, source: str | None = None, *,
               outsiders: bool = True) -> RoutedResult | BudgetDenied:
        """Assemble the context within the route's budget and call the model. When the server says the prompt is
        too long, the router learns the window it named and shrinks that model's budget (for good), and this turn
        is rebuilt for that window (compact mode in a small one) and retried once."""
        parts = self.hooks.prompt_parts()
        creator_message = parts.get("creator_message")
        notes = [creator_note(creator_message, self.hooks.clean_instruction)] if first_run and creator_message else []
        notes += [wake_note] if wake_note else []

        sent: list[tuple] = [(), ()]  # the direct request's messages and tools, to scale a refusal by

        def ask(route: Route) -> RoutedResult | BudgetDenied:
            window = route.model.context_window
            compact = is_compact(self.config, window)
            system = system_prompt(self.identity, soul=parts.get("soul"), genesis=parts.get("genesis"),
                                   constitution=parts.get("constitution"), clean=self.hooks.clean_instruction,
                                   compact=compact)
            tools = offered_tools(self.tools.specs(), route.tier, compact=compact)
            mode = self._mode = self.modes.choose(
                route.model.model_id, window, capacity=route.context_budget,
                fixed_tokens=estimate_tokens(system) + estimate_tokens(tools_text(tools)))
            if mode.stepwise:  # a small model: one step at a time
                self.last_context = None  # no assembled context: status shows no stale figures
                table = tools if compact else offered_tools(self.tools.specs(), route.tier, compact=True)
                step = self._step_input(parts, message, source, window, first_run, outsiders).fitted(
                    route.context_budget - stepwise.CALL_TOKENS - STEP_FRAME_TOKENS,
                    lambda text: worst_case_tokens(estimate_tokens(text)))
                return self._stepwise(step, table, route, tier, turn_id)
            context = self.last_context = self.context.build(
                route, system=system, tools=tools, status=status_block(status), pending=message, notes=notes,
                turn_id=turn_id, tier=tier, cancel=self._abandon, compact=compact, outsiders=outsiders)
            sent[:] = [context.messages, tools]
            return self.router.route(context.messages, tier=tier, turn_id=turn_id, tools=tools, planned=route,
                                     cancel=self._abandon)

        try:
            return ask(route)
        except ContextTooLong as exc:
            return ask(self.router.shrink_context(route, exc, *sent))

    def _step_input(self, parts: dict[str, str | None], message: Message | None, source: str | None,
                    window: int, first_run: bool = False, outsiders: bool = True) -> stepwise.StepInput:
        """What a small model's steps show: its purpose, the goal's next task, the memories retrieved for the turn's
        input, a message (in the first turn, the creator's first message too) or the controls' warning, the last
        action."""
        purpose = self.hooks.clean_instruction(parts.get("genesis") or "(none written yet)")
        task = next_task(self.db)
        task_text = ": ".join(filter(None, (task.title, task.description))) if task else None
        if task and active_goal_origin(self.db) == "external":  # a stranger's goal is not the agent's own task
            task_text = f"(set on an outsider's message, unverified) {task_text}" if outsiders else None
            task = task if outsiders else None
        said = message.content if message and source == "inbox" else None
        self._owner_words_shown = said is None and source != "inbox" and bool(self.owner_words)
        if self._owner_words_shown:
            said = "\n".join(f"{OWNER_WAKE_LABEL} {self.hooks.clean_instruction(words)}" for words in self.owner_words)
        if first_run and parts.get("creator_message"):  # setup's --creator-message, as the system notes show it
            first = f"{FIRST_MESSAGE_LABEL}\n{self.hooks.clean_instruction(parts['creator_message'])}"
            said = f"{first}\n\n{said}" if said else first
        memories = self.context.recall_lines(said or task_text or purpose, window, outsiders=outsiders)
        return stepwise.StepInput(purpose, said, self._previous_action, task.id if task else None, task_text,
                                  memories=memories,
                                  warning=message.content if message and source == "system" else None)

    def _stepwise(self, step: stepwise.StepInput, offered: tuple[ToolSchema, ...], route: Route, tier: str,
                  turn_id: str) -> RoutedResult | BudgetDenied:
        """A small model's turn (``agent/stepwise.py``): it chooses an action, then calls that one tool."""
        choices = stepwise.actions(offered, step)
        messages, choice_tool = stepwise.choose_request(step, choices)
        first = self.router.route(messages, tier=tier, turn_id=turn_id, tools=(choice_tool,),
                                  planned=replace(route, max_tokens=min(route.max_tokens, stepwise.CHOOSE_TOKENS)),
                                  cancel=self._abandon, tool_choice=stepwise.CHOOSE, temperature=stepwise.TEMPERATURE)
        if isinstance(first, BudgetDenied):
            return first
        if self._owner_words_shown:  # the model has read them (step 2 shows them again, from ``step``)
            self.owner_words = []
        names = tuple(tool.name for tool in choices)
        acted = stepwise.acted(first.result, names)
        if acted is not None:  # the server let the model call a tool itself: that call is the turn's
            return replace(first, result=acted)
        name = stepwise.chosen(first.result, names)
        tool = next((t for t in choices if t.name == name), None)
        if tool is None:  # no action chosen: the turn answered without a tool
            return replace(first, result=replace(first.result, tool_calls=()))
        messages, call_tool = stepwise.fill_request(step, tool)
        second = self.router.route(messages, tier=tier, turn_id=turn_id, tools=(call_tool,),
                                   planned=replace(route, max_tokens=min(route.max_tokens, stepwise.CALL_TOKENS)),
                                   cancel=self._abandon, tool_choice=name, temperature=stepwise.TEMPERATURE)
        if isinstance(second, BudgetDenied):
            return second
        return stepwise.combined(first, replace(second, result=stepwise.the_call(second.result, name)))

    def _context_figures(self) -> dict[str, Any]:
        if self.last_context is None:
            return {}
        util = self.last_context.utilization
        return {"context": {"used": util.used, "capacity": util.capacity, "window": util.window,
                            "turns": util.turns_in_context, "memoryTokens": util.memory_tokens,
                            "recommendation": util.recommendation}}

    def _persist(self, turn: StoredTurn, claimed: list[str]) -> None:
        """The turn, its tool calls and the inbox acknowledgements: all or nothing."""
        crash_point("before_turn_commit")
        with self.db.transaction():
            insert_turn(self.db, turn)
            if claimed:
                self.hooks.ack_inbox(claimed, self.now())
                if turn.external:  # it read an outsider's message: the next cycle is the agent's own
                    set_value(self.db, OWN_CYCLE_OWED_KEY, turn.timestamp, self.now())
            self.open_turns.close()
        self._uncommitted = None
        crash_point("turn_committed")


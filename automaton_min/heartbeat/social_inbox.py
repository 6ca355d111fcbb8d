"""The heartbeat task ``check_social_inbox``: poll the relay, store what passes intake, release approvals (README:
Social relay). It asks for a wake through ``TaskResult.wake`` (source ``social``), never through ``WakeBus``: the
scheduler stores the one wake event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from automaton_min.clock import DAY_MS, HOUR_MS, MINUTE_MS, to_iso
from automaton_min.errors import RuntimeFailure
from automaton_min.heartbeat.task_api import ServiceUnreachable, TaskContext, TaskResult
from automaton_min.net.http import NetworkError
from automaton_min.net.resilient import CircuitOpenError
from automaton_min.log import get_logger
from automaton_min.social import approvals
from automaton_min.social.intake import authority_for, ingest, saved_cursor
from automaton_min.social.protocol import ACCEPT_WINDOW_MS, MAX_FUTURE_SKEW_MS
from automaton_min.social.relay import POLL_LIMIT
from automaton_min.store.kv import delete_value, get_value, json_object, set_value

if TYPE_CHECKING:
    from automaton_min.social.intake import IntakeReport, Refused

log = get_logger(__name__)

POLL_INTERVAL_KEY = "socialPollIntervalSeconds"
DEFAULT_POLL_INTERVAL_S = 120
BACKOFF_KEY = "social_poll_backoff"
CLOCK_KEY = "social_clock_untrusted"  # why the relay waits for the clock, while it does (status, doctor)
TOLD_KEY = "social_refusals_told"  # signer -> when it was told, this hour, that messages of its were refused
TELLS_PER_HOUR = 3
BACKOFF_BASE_MS = MINUTE_MS
BACKOFF_MAX_MS = 30 * MINUTE_MS
MAX_PAGES = 5


def poll_interval_s(config: Any) -> int:
    """Seconds between polls: ``socialPollIntervalSeconds``, default 120 (the reference's 2 minutes)."""
    value = config.get(POLL_INTERVAL_KEY) if config is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else DEFAULT_POLL_INTERVAL_S


def _backoff(ctx: TaskContext) -> dict[str, Any]:
    return json_object(get_value(ctx.db, BACKOFF_KEY))


def check_social_inbox(ctx: TaskContext) -> TaskResult:
    """Poll, verify and store relay messages; wake the agent when any were stored or an approval ran."""
    if ctx.relay is None:
        return TaskResult("no relay configured (socialRelayUrl is empty)")
    now_ms = ctx.now()
    backoff = _backoff(ctx)
    if isinstance(backoff.get("untilMs"), int) and now_ms < backoff["untilMs"]:
        return TaskResult(f"relay poll skipped: backing off until {to_iso(backoff['untilMs'])}")
    clock = ctx.clock_trust.reading(ctx.db, now_ms)
    if not clock.trusted:  # no signed time is judged against a clock that may be wrong: the messages wait
        if get_value(ctx.db, CLOCK_KEY) != clock.why:
            set_value(ctx.db, CLOCK_KEY, clock.why, now_ms)
            log.warning("the relay waits: the clock is not trusted", extra={"clock": clock.why})
        return TaskResult(f"relay poll waits: {clock.why}")
    if get_value(ctx.db, CLOCK_KEY) is not None:
        delete_value(ctx.db, CLOCK_KEY)
        log.info("the clock is trusted again; polling the relay", extra={"clock": clock.why})
    ctx.clock_trust.note(ctx.db, now_ms)
    approvals.expire(ctx.db, now_ms)  # by a clock it can believe, like every time this task judges
    creator = ctx.config.get("creatorAddress") if ctx.config is not None else None
    stored, dropped, refused = [], 0, []
    try:
        for _ in range(MAX_PAGES):
            result = ctx.relay.poll(saved_cursor(ctx.db), POLL_LIMIT)
            report: IntakeReport = ingest(ctx.db, result, self_address=ctx.wallet_address, creator_address=creator,
                                          now_ms=ctx.now())
            stored += report.stored
            refused += report.refused
            dropped += sum(report.dropped.values())
            if len(result.messages) < POLL_LIMIT or not result.next_cursor:
                break
    except (NetworkError, CircuitOpenError) as exc:  # no answer: the scheduler backs off and says it once
        raise ServiceUnreachable("relay", str(exc)) from None
    except RuntimeFailure as exc:  # an error answer, or one that is not the wire format
        failures = int(backoff.get("failures") or 0) + 1
        wait_ms = min(BACKOFF_BASE_MS * 2 ** (failures - 1), BACKOFF_MAX_MS)
        set_value(ctx.db, BACKOFF_KEY, orjson.dumps({"failures": failures, "untilMs": now_ms + wait_ms,
                                                     "error": str(exc)[:300]}).decode(), now_ms)
        if failures == 1:  # said once; the back-off grows quietly and the recovery is said too
            log.warning("relay poll failed; backing off (said again when the relay answers)",
                        extra={"error": str(exc)[:200], "wait_s": wait_ms // 1000})
        return TaskResult(f"relay poll failed ({exc}); next try in {wait_ms // 1000} s")
    if backoff:
        delete_value(ctx.db, BACKOFF_KEY)
        log.info("relay answers again", extra={"failures": backoff.get("failures")})
    outcomes = approvals.release_approved(ctx.db, ctx.conway, ctx.config, ctx.now)
    outcomes += task_reports(ctx, stored)
    tell_refused(ctx, refused, creator)
    summary = f"{len(stored)} stored, {dropped} dropped" + (f"; {'; '.join(outcomes)}" if outcomes else "")
    if not stored and not outcomes:
        return TaskResult(summary, reached=("relay",))
    return TaskResult(summary, wake=wake_reason(stored, creator, outcomes),
                      wake_payload={"source": "social", "messageIds": [m.id for m in stored]}, reached=("relay",))


def tell_refused(ctx: TaskContext, refused: list["Refused"], creator: str | None) -> None:
    """A signed reply to the creator or a child whose message was refused for its time, at most 3 an hour each:
    a creator learns where an order went. Anyone else is only recorded: keys cost nothing, so answering every
    signer would let a stranger spend the agent's outbound messages."""
    from automaton_min.store.children import names_by_address

    if not refused:  # an ordinary poll writes nothing
        return
    now_ms = ctx.now()
    told = {signer: [at for at in times if isinstance(at, int) and at > now_ms - HOUR_MS]
            for signer, times in json_object(get_value(ctx.db, TOLD_KEY)).items() if isinstance(times, list)}
    answered = {creator.lower()} if creator else set()
    answered |= set(names_by_address(ctx.db))
    for refusal in refused:
        if refusal.signer not in answered or len(told.get(refusal.signer, ())) >= TELLS_PER_HOUR:
            continue
        told.setdefault(refusal.signer, []).append(now_ms)
        try:
            ctx.relay.send(refusal.signer, refusal_notice(refusal, now_ms), reply_to=refusal.id, db=ctx.db)
        except RuntimeFailure as exc:  # unreachable, refused or over the outbound limit: the record stays
            log.warning("could not tell a sender its message was refused", extra={"error": str(exc)[:200]})
            continue
        log.info("told a sender its message was refused", extra={"to": refusal.signer, "reason": refusal.reason})
    set_value(ctx.db, TOLD_KEY, orjson.dumps({k: v for k, v in told.items() if v}).decode(), now_ms)


def refusal_notice(refusal: "Refused", now_ms: int) -> str:
    when = refusal.signed_at[:40]
    if refusal.reason == "future":
        why = (f"it is signed at {when}, more than {MAX_FUTURE_SKEW_MS // MINUTE_MS} minutes ahead of my clock "
               f"({to_iso(now_ms)}); one of our clocks is wrong: if yours is right, tell my owner to set mine")
    else:
        why = (f"it is signed at {when}, more than {ACCEPT_WINDOW_MS // DAY_MS} days before my clock "
               f"({to_iso(now_ms)}); an old signed message is not taken again. Send it anew if you still mean it")
    return f"automaton-min: your message {refusal.id[:80]} was not taken: {why}."


def task_reports(ctx: TaskContext, stored: list) -> list[str]:
    """A child's signed "task done <id> try <n>: ..." completes the try of the task given to it
    (goals/delegate.py); others change nothing."""
    from automaton_min.goals.delegate import take_report
    from automaton_min.store.inbox import get_message

    lines = []
    for accepted in stored:
        message = get_message(ctx.db, accepted.id)
        line = take_report(ctx.db, message.id, accepted.signed_by, message.content, ctx.now(),
                           signed_at=accepted.signed_at) if message else None
        lines += [line] if line else []
    return lines


def wake_reason(stored: list, creator: str | None, outcomes: list[str]) -> str:
    """``"2 new message(s) from 0xabc... (creator), 0xdef..."`` plus what approvals did."""
    parts = []
    if stored:
        senders = list(dict.fromkeys(
            m.from_address + (" (creator)" if authority_for(m.signed_by, creator) == "creator" else
                              "" if m.signed_by else " (unverified)") for m in stored))
        shown = ", ".join(senders[:3]) + (f" and {len(senders) - 3} more" if len(senders) > 3 else "")
        parts.append(f"{len(stored)} new message(s) from {shown}")
    parts += outcomes
    return "; ".join(parts)

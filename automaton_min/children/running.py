"""A child at work: configured from its genesis with a Conway key of its own, started as a process that outlives the
exec call, checked (``status --json`` in its sandbox), restarted when it stopped, pruned when it is gone for good
(README: Children)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from automaton_min.children.lifecycle import transition
from automaton_min.children.spawn import CHILD_BINARY, GENESIS_NAME
from automaton_min.clock import DAY_MS, to_iso
from automaton_min.crashpoint import crash_point
from automaton_min.store.children import Child, get_child
from automaton_min.store.kv import delete_value, get_value, set_value

if TYPE_CHECKING:
    from automaton_min.conway.client import ConwayClient
    from automaton_min.store.sqlite import Database

CHILD_HOME = '"$HOME/.automaton"'  # in a command: the sandbox's /root/.automaton, wherever its HOME is
CHILD_LOG = f"{CHILD_HOME}/agent.log"
RESTARTS_PREFIX = "child_restarts."  # KV: restarts tried since the child was last healthy
STARTS_PREFIX = "child_starts."  # KV: start attempts ever (their number is in the calls' Idempotency-Keys)
MAX_RESTARTS = 3  # restarts without a healthy check in between; then the child is stopped (dead)
STARTABLE = ("wallet_verified", "funded", "unhealthy", "stopped")
WATCHED = ("starting", "healthy", "unhealthy")
_STATE = re.compile(r"[a-z_]{1,20}")
DEAD_GRACE_MS = 7 * DAY_MS  # the heartbeat prunes a dead child this long after it died, not before
KEEP_CLEANED = 50  # retention: the rows of children long cleaned up


@dataclass(frozen=True)
class Health:
    """What one look at a child found: ``healthy`` when its agent runs and is not dead."""

    healthy: bool
    running: bool
    state: str | None
    credits_cents: int | None
    problem: str | None = None
    unreachable: bool = False  # Conway did not answer: nothing is known of the child

    def sentence(self) -> str:
        if self.problem:
            return f"unreachable: {self.problem}"
        credits = f", {self.credits_cents} cents of credits" if self.credits_cents is not None else ""
        return f"{'running' if self.running else 'not running'}, state {self.state or 'unknown'}{credits}"


def configure_script(*, conway_api_url: str, relay_url: str | None) -> str:
    """The child's own set-up, run in its sandbox: a Conway key from its own wallet (SIWE; nothing of the parent's),
    then ``setup`` from the genesis the parent wrote."""
    binary = f"./{CHILD_BINARY}"
    lines = ["set -e",
             f"if ! grep -qs conwayApiKey {CHILD_HOME}/config.json; then "
             f"{binary} provision --api-url {shlex.quote(conway_api_url)} --json > /dev/null; fi",
             f"if [ ! -f {CHILD_HOME}/automaton.json ]; then "  # once: the child may change its purpose later
             f"{binary} setup --yes --genesis {CHILD_HOME}/{GENESIS_NAME} --json > /dev/null; fi"]
    if relay_url:
        lines.append(f"{binary} config set socialRelayUrl {shlex.quote(relay_url)} > /dev/null")
    return "; ".join(lines)


def start_child(db: "Database", client: "ConwayClient", child: Child, *, conway_api_url: str,
                relay_url: str | None, now_ms: int) -> Child:
    """Configure the child (once) and start its agent in the background of its sandbox (``nohup setsid``: it
    outlives the exec call); the child is ``starting`` until a check finds it running."""
    from automaton_min.update.manifest import Refused

    if child.status not in STARTABLE or not child.sandbox_id:
        raise Refused(f"child {child.name} is {child.status}: only a child with a verified wallet that is not running "
                      f"is started ({', '.join(STARTABLE)})")
    attempt = int(get_value(db, STARTS_PREFIX + child.id) or 0) + 1
    with db.transaction(durable=True):  # before the calls: a failed attempt's keys are never used again
        set_value(db, STARTS_PREFIX + child.id, str(attempt), now_ms)
    ran = client.exec(configure_script(conway_api_url=conway_api_url, relay_url=relay_url), 180,
                      sandbox_id=child.sandbox_id, idempotency_key=f"child-{child.id}-configure-{attempt}")
    if ran.exit_code != 0:
        raise Refused(f"the child's set-up failed (exit {ran.exit_code}): {_tail(ran.stderr or ran.stdout)}")
    launch = (f"nohup setsid ./{CHILD_BINARY} run > {CHILD_LOG} 2>&1 < /dev/null & echo started")
    ran = client.exec(launch, 30, sandbox_id=child.sandbox_id, idempotency_key=f"child-{child.id}-start-{attempt}")
    if ran.exit_code != 0 or "started" not in ran.stdout:
        raise Refused(f"the child's agent did not start (exit {ran.exit_code}): {_tail(ran.stderr or ran.stdout)}")
    crash_point("child.launched")
    transition(db, child.id, "starting", f"its agent started in sandbox {child.sandbox_id} (start {attempt})",
               now_ms, metadata={"attempt": attempt})
    return get_child(db, child.id)


def look_at(client: "ConwayClient", child: Child) -> Health:
    """``automaton-min status --json`` in the child's sandbox, read; a sandbox that does not answer is unhealthy."""
    from automaton_min.conway.client import ConwayError

    if not child.sandbox_id:
        return Health(False, False, None, None, "no sandbox")
    try:
        ran = client.exec(f"./{CHILD_BINARY} status --json", 60, sandbox_id=child.sandbox_id)
        report = orjson.loads(ran.stdout)
    except ConwayError as exc:
        return Health(False, False, None, None, str(exc)[:200], unreachable=exc.unanswered or exc.outage)
    except orjson.JSONDecodeError:
        return Health(False, False, None, None, f"status gave no report (exit {ran.exit_code}): "
                                               f"{_tail(ran.stderr or ran.stdout)}")
    if not isinstance(report, dict):
        return Health(False, False, None, None, "status gave no report")
    running, state = report.get("running") is True, report.get("state")
    state = state if isinstance(state, str) and _STATE.fullmatch(state) else None  # a child's words: a state name only
    cents = report.get("creditsCents") if type(report.get("creditsCents")) is int else None
    return Health(running and state != "dead", running, state, cents)


def record_health(db: "Database", child: Child, health: Health, now_ms: int) -> Child:
    """The check's outcome in the lifecycle: a watched child becomes healthy or unhealthy; ``last_checked`` moves."""
    with db.transaction():
        db.execute("UPDATE children SET last_checked = ? WHERE id = ?", (to_iso(now_ms), child.id))
        if health.healthy:
            delete_value(db, RESTARTS_PREFIX + child.id)
        if child.status in WATCHED:
            target = "healthy" if health.healthy else "unhealthy"
            if target != child.status:
                transition(db, child.id, target, health.sentence(), now_ms)
    return get_child(db, child.id)


def tend(db: "Database", client: "ConwayClient", child: Child, *, conway_api_url: str, relay_url: str | None,
         now_ms: int) -> str:
    """One health pass over a watched child: look, record, and restart one that stopped running (after
    ``MAX_RESTARTS`` restarts without a healthy look, it is stopped: dead). One line on what happened."""
    from automaton_min.conway.client import ConwayError
    from automaton_min.update.manifest import Refused

    health = look_at(client, child)
    if health.unreachable:  # Conway's trouble, not the child's: no verdict, no restart counted
        return f"{child.name}: {child.status}, not looked at ({health.sentence()})"
    child = record_health(db, child, health, now_ms)
    if child.status != "unhealthy" or health.running:
        return f"{child.name}: {child.status} ({health.sentence()})"
    tried = int(get_value(db, RESTARTS_PREFIX + child.id) or 0)
    if tried >= MAX_RESTARTS:
        transition(db, child.id, "stopped", f"not running after {MAX_RESTARTS} restarts: dead", now_ms)
        return f"{child.name}: stopped, dead after {MAX_RESTARTS} restarts ({health.sentence()})"
    with db.transaction():
        set_value(db, RESTARTS_PREFIX + child.id, str(tried + 1), now_ms)
    try:
        start_child(db, client, child, conway_api_url=conway_api_url, relay_url=relay_url, now_ms=now_ms)
    except (Refused, ConwayError) as exc:
        return f"{child.name}: unhealthy, the restart failed: {exc}"
    return f"{child.name}: restarted ({health.sentence()})"


def _died_ms(db: "Database", child_id: str) -> int:
    """When the child's last step (its death) was recorded, in epoch ms."""
    from automaton_min.clock import from_iso

    stamp = db.scalar("SELECT MAX(created_at) FROM child_lifecycle_events WHERE child_id = ?", (child_id,))
    return from_iso(stamp) if stamp else 0


def _tail(text: str) -> str:
    return " ".join((text or "").split())[-200:] or "no output"



def prune_dead(db: "Database", client: "ConwayClient | None", *, keep: int = 5, now_ms: int,
               grace_ms: int = 0) -> list[str]:
    """Clean up the dead (``stopped`` or ``failed``) children beyond the newest ``keep`` (those ever funded only
    ``grace_ms`` after they died): each one's sandbox deleted, then ``cleaned_up``; cleaned-up rows beyond the newest
    ``KEEP_CLEANED`` are deleted with their events. The names of the children cleaned up."""
    from automaton_min.children.lifecycle import BadTransition
    from automaton_min.conway.client import ConwayError

    dead = db.query("SELECT id FROM children WHERE status IN ('stopped', 'failed') ORDER BY created_at DESC, id DESC")
    cleaned = []
    for (child_id,) in dead[max(keep, 0):]:
        child = get_child(db, child_id)  # again: a child started since the list was read is not dead
        grace = grace_ms if child.funded_amount_cents else 0  # a wallet with credits in it waits; none, not
        if child.status not in ("stopped", "failed") or _died_ms(db, child.id) > now_ms - grace:
            continue
        if child.sandbox_id:
            if client is None:
                continue  # its sandbox cannot be deleted without a Conway client: kept until one can
            try:
                client.delete_sandbox(child.sandbox_id)
            except ConwayError:
                continue  # tried again at the next prune
        try:
            transition(db, child.id, "cleaned_up", f"pruned: sandbox {child.sandbox_id or '(none)'} deleted", now_ms)
        except BadTransition:
            continue  # started again meanwhile: its next start finds no sandbox and fails it
        cleaned.append(child.name)
    with db.transaction():
        old = [row[0] for row in db.query("SELECT id FROM children WHERE status = 'cleaned_up' "
                                          "ORDER BY created_at DESC, id DESC LIMIT -1 OFFSET ?", (KEEP_CLEANED,))]
        for child_id in old:
            db.execute("DELETE FROM child_lifecycle_events WHERE child_id = ?", (child_id,))
            db.execute("DELETE FROM children WHERE id = ?", (child_id,))
    return cleaned

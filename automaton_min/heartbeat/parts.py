"""The remote parts a run may use (the Conway API, the social relay, the RPC node): off, on or unreachable (README: The
service, Remote parts). KV ``parts`` keeps their states for ``status``, written when they change.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from automaton_min.clock import MINUTE_MS, to_iso
from automaton_min.config import LOCAL_ONLY_ON, local_only, relay_url
from automaton_min.log import get_logger
from automaton_min.store.kv import get_value, json_object, set_json

if TYPE_CHECKING:
    from automaton_min.config import Config
    from automaton_min.store.db import Database

log = get_logger(__name__)

PARTS_KEY = "parts"
BACKOFF_BASE_MS = MINUTE_MS
BACKOFF_MAX_MS = 30 * MINUTE_MS
PROBE_TIMEOUT_S = 3.0
LABELS = {"conway": "the Conway API", "relay": "the social relay", "rpc": "the RPC node"}
URL_SETTINGS = {"conway": "conwayApiUrl", "relay": "socialRelayUrl", "rpc": "rpcUrl"}
OFF_BECAUSE = {"conway": "no conwayApiKey", "relay": "socialRelayUrl is empty"}
LOCAL_ONLY = "local only"  # why the relay and the RPC node are off when localOnly is true
# Tasks with nothing to do while their part is off (the RPC node is off only for a local-only agent).
TASK_PARTS = {"check_credits": "conway", "check_social_inbox": "relay", "check_usdc_balance": "rpc",
              "reconcile_payments": "rpc"}
# How to turn off a part the agent can do without (a local-only agent needs no relay), said where it is unreachable.
TURN_OFF = {"relay": 'automaton-min config set socialRelayUrl ""', "rpc": LOCAL_ONLY_ON}


def describe(name: str) -> str:
    """``the RPC node (rpcUrl)``: the part and the setting that points at it."""
    return f"{LABELS[name]} ({URL_SETTINGS[name]})" if name in LABELS else name


def parts_of(config: "Config") -> dict[str, str | None]:
    """Each part's URL as ``config`` sets it, None when off; the RPC node is off only for a local-only agent (else
    ``rpcUrl`` or the public Base node)."""
    from automaton_min.chain.usdc import BASE
    from automaton_min.chain.usdc import rpc_url

    alone = local_only(config)
    return {"conway": config.get("conwayApiUrl") if config.get("conwayApiKey") else None,
            "relay": relay_url(config),
            "rpc": None if alone else rpc_url(config, BASE)}


def off_reasons(config: "Config") -> dict[str, str]:
    """Why each part that ``config`` turns off is off."""
    alone = local_only(config)
    return {name: LOCAL_ONLY if alone and name in ("relay", "rpc") else OFF_BECAUSE.get(name, "not configured")
            for name, url in parts_of(config).items() if url is None}


def backoff_ms(failures: int) -> int:
    """The wait after the ``failures``-th failure in a row: 1 min, doubling, at most 30 min."""
    return min(BACKOFF_BASE_MS * 2 ** min(max(failures - 1, 0), 16), BACKOFF_MAX_MS)


@dataclass
class _Down:
    since_ms: int
    failures: int
    error: str
    next_try_ms: int


class PartStates:
    """The parts' states in one run, shared by its threads; each call takes the caller's own database."""

    def __init__(self, parts: dict[str, str | None], why: dict[str, str] | None = None) -> None:
        self.parts = parts  # name -> URL, None when off
        self.why = why or {}  # name -> why it is off, when it is not for OFF_BECAUSE's reason
        self._down: dict[str, _Down] = {}
        self._lock = threading.Lock()

    @classmethod
    def of(cls, config: "Config") -> "PartStates":
        return cls(parts_of(config), off_reasons(config))

    def is_off(self, name: str) -> bool:
        return name in self.parts and self.parts[name] is None

    def off_tasks(self) -> dict[str, str]:
        """Heartbeat tasks whose part is off, with why (they are skipped without a warning)."""
        return {task: f"{LABELS[part]} is off ({self._why(part)})"
                for task, part in TASK_PARTS.items() if self.is_off(part)}

    def _why(self, name: str) -> str:
        return self.why.get(name) or OFF_BECAUSE.get(name, "not configured")

    def unreachable(self, db: "Database", name: str, error: str, now_ms: int, *, say: bool = True) -> int:
        """``name`` did not answer; the ms to wait before trying it again. Logged when it was not down already
        (unless ``say`` is False: the banner says it)."""
        with self._lock:
            down = self._down.get(name)
            failures = down.failures + 1 if down else 1
            wait = backoff_ms(failures)
            self._down[name] = _Down(down.since_ms if down else now_ms, failures, error[:300], now_ms + wait)
            self._write(db, now_ms)
        if down is None and say:
            log.warning(f"{describe(name)} does not answer; tried again with a growing back-off, said again when it "
                        "answers", extra={"part": name, "error": error[:200], "wait_s": wait // 1000})
        return wait

    def answered(self, db: "Database", name: str, now_ms: int) -> None:
        """``name`` answered: its back-off starts over; logged when it was down."""
        with self._lock:
            down = self._down.pop(name, None)
            if down is not None:
                self._write(db, now_ms)
        if down is not None:
            log.info(f"{describe(name)} answers again", extra={"part": name, "failures": down.failures})

    def states(self) -> dict[str, dict[str, Any]]:
        """``{name: {"state": "off" | "on" | "unreachable", "url", ...}}``, as KV ``parts`` holds it."""
        with self._lock:
            return {name: _state(name, url, self._down.get(name), self._why(name)) for name, url in self.parts.items()}

    def banner(self) -> str:
        """What is not on, for the start banner: ``the Conway API off (no conwayApiKey); the RPC node
        unreachable at http://... (rpcUrl)``, then how to turn off an unreachable part that can be off; "all on"
        when every part is."""
        states = self.states()
        return "; ".join(filter(None, (said(states), turn_off_hint(states)))) or "all on"

    def save(self, db: "Database", now_ms: int) -> None:
        """Write every part's state to KV ``parts`` (at start, replacing what an earlier run left)."""
        with self._lock:
            self._write(db, now_ms)

    def _write(self, db: "Database", now_ms: int) -> None:
        set_json(db, PARTS_KEY, {name: _state(name, url, self._down.get(name), self._why(name))
                                 for name, url in self.parts.items()}, now_ms)


def _state(name: str, url: str | None, down: _Down | None, why: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"state": "off" if url is None else "unreachable" if down else "on", "url": url}
    if url is None:
        state["why"] = why or OFF_BECAUSE.get(name, "not configured")
    if down is not None:
        state.update(since=to_iso(down.since_ms), failures=down.failures, error=down.error,
                     nextTryAt=to_iso(down.next_try_ms))
    return state


def said(states: dict[str, dict[str, Any]]) -> str:
    """The parts that are off or unreachable, in one line (empty when all are on)."""
    return "; ".join(f"{LABELS.get(name, name)} off ({s.get('why')})" if s["state"] == "off" else
                     f"{LABELS.get(name, name)} unreachable at {s['url']} ({URL_SETTINGS.get(name, '?')})"
                     for name, s in states.items() if s["state"] != "on")


def turn_off_hint(states: dict[str, dict[str, Any]]) -> str:
    """How to turn off the unreachable parts, in one line: ``to turn the social relay off: automaton-min config set
    socialRelayUrl ""``; for the RPC node, local-only mode (which turns the relay off too); empty when none is."""
    down = [name for name, s in states.items() if s["state"] == "unreachable" and name in TURN_OFF]
    if "rpc" in down:
        return f"to run local only (no social relay, no RPC node, nothing paid): {TURN_OFF['rpc']}"
    return "; ".join(f"to turn {LABELS[name]} off: {TURN_OFF[name]}" for name in down)


def probe(states: PartStates, db: "Database", now_ms: int, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """At start: one request to each part that is on; any HTTP answer means it answers. What does not answer is
    marked unreachable without a log line: the start banner names it."""
    from automaton_min.net.http import NetworkError, request

    for name, url in states.parts.items():
        if url is None:
            continue
        try:
            request("GET", url, timeout=timeout_s)
        except NetworkError as exc:
            states.unreachable(db, name, str(exc), now_ms, say=False)
    states.save(db, now_ms)


def stored_states(db: "Database", config: "Config") -> dict[str, dict[str, Any]]:
    """For ``status``: off as ``config`` says now; unreachable as a run last found it (at the same URL)."""
    stored = json_object(get_value(db, PARTS_KEY))
    why = off_reasons(config)
    result = {}
    for name, url in parts_of(config).items():
        last = stored.get(name)
        same = url is not None and isinstance(last, dict) and last.get("url") == url
        result[name] = dict(last) if same and last.get("state") == "unreachable" else _state(name, url, None,
                                                                                               why.get(name))
    return result

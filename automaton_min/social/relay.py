"""The social relay client: send signed messages, poll with signed headers (README: Social relay).

Calls go through ``net.resilient`` with the ``social`` breaker; POSTs carry no idempotency key, so a send is tried
once. A poll answers ``{messages, next_cursor}``. Without a database the hourly limit is counted in memory.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit

from automaton_min.clock import Clock, HOUR_MS, system_now, to_iso
from automaton_min.config import relay_url
from automaton_min.errors import ConfigError, RuntimeFailure
from automaton_min.net.http import HttpError, snippet
from automaton_min.crashpoint import crash_point
from automaton_min.social import sent_log
from automaton_min.social.protocol import OUTBOUND_PER_HOUR, check_outbound, content_hash, sign_poll, sign_send

if TYPE_CHECKING:
    from automaton_min.chain.wallet import Wallet
    from automaton_min.net.http import Response
    from automaton_min.store.db import Database

SERVICE = "social"
TIMEOUT_S = 30.0
POLL_LIMIT = 50


class RelayError(RuntimeFailure):
    """The relay answered with an error, or with something that is not its wire format."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class OutboundLimited(RuntimeFailure):
    """The rolling-hour outbound limit is reached; nothing was sent."""


@dataclass(frozen=True)
class PollResult:
    messages: list[dict[str, Any]]
    next_cursor: str | None


def check_relay_url(url: str) -> str:
    """The relay URL without a trailing slash; https, or http only to a loopback address."""
    parts = urlsplit(url or "")
    if parts.scheme == "https" and parts.hostname:
        return url.rstrip("/")
    if parts.scheme == "http" and parts.hostname and _loopback(parts.hostname):
        return url.rstrip("/")
    raise ConfigError(f"socialRelayUrl: the relay URL must use HTTPS (http only to a loopback address): {url!r}")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OutboundLimiter:
    """At most ``per_hour`` send attempts in any rolling hour."""

    def __init__(self, per_hour: int = OUTBOUND_PER_HOUR) -> None:
        self.per_hour = per_hour
        self._recent: deque[int] = deque()
        self._lock = threading.Lock()

    def admit(self, now_ms: int, db: "Database | None" = None) -> None:
        """Count one attempt, or raise ``OutboundLimited``."""
        if db is not None:
            with db.transaction():
                db.execute("DELETE FROM social_outbound WHERE sent_at <= ?", (to_iso(now_ms - HOUR_MS),))
                used = int(db.scalar("SELECT COUNT(*) FROM social_outbound", default=0))
                if used >= self.per_hour:
                    raise OutboundLimited(self._refusal())
                db.execute("INSERT INTO social_outbound (sent_at) VALUES (?)", (to_iso(now_ms),))
            return
        with self._lock:
            while self._recent and self._recent[0] <= now_ms - HOUR_MS:
                self._recent.popleft()
            if len(self._recent) >= self.per_hour:
                raise OutboundLimited(self._refusal())
            self._recent.append(now_ms)

    def _refusal(self) -> str:
        return f"message not sent: the limit of {self.per_hour} outbound messages per hour is reached; try later"


class RelayClient:
    """Speaks to one relay as one wallet. Thread-safe; database handles are passed per call (one per thread)."""

    def __init__(self, url: str, wallet: "Wallet", *, now: Clock = system_now, http: Any = None,
                 limiter: OutboundLimiter | None = None) -> None:
        self.url = check_relay_url(url)
        self._wallet = wallet
        self.address = wallet.address.lower()
        self.now = now
        self._http = http
        self.limiter = limiter or OutboundLimiter()

    @classmethod
    def from_config(cls, config: Any, wallet: "Wallet", *, now: Clock = system_now) -> "RelayClient | None":
        """The client for ``socialRelayUrl``, or None when it is empty or the agent is local only (no relay)."""
        url = relay_url(config)
        return cls(url, wallet, now=now) if url else None

    def _request(self) -> Callable[..., "Response"]:
        if self._http is None:
            from automaton_min.net.resilient import ResilientHttp

            # A relay that does not answer is said by the heartbeat (heartbeat/parts.py) and by send_message's error.
            self._http = ResilientHttp(SERVICE, timeout_s=TIMEOUT_S, opened_level=logging.DEBUG)
        return self._http.request

    def send(self, to: str, content: str, reply_to: str | None = None, *, db: "Database | None" = None,
             turn_id: str | None = None, call_index: int | None = None) -> dict[str, Any]:
        """Sign and post one message; ``{"id": ...}`` as the relay answered.

        With a database, a ``turn_id`` and the call's ``call_index``, the send happens at most once per turn and
        call: a repeated one answers ``{"id": ..., "earlier": SentRecord}`` from ``sent_messages`` and sends nothing.
        """
        check_outbound(to, content)
        message_id = None
        if db is not None and turn_id is not None and call_index is not None:
            message_id = sent_log.message_id(self.address, turn_id, call_index)
            earlier = sent_log.find(db, message_id)
            if earlier is not None:
                return {"id": earlier.relay_id, "earlier": earlier}
        now_ms = self.now()
        self.limiter.admit(now_ms, db)
        signed_at, signature = sign_send(self._wallet, to, content, now_ms)
        body: dict[str, Any] = {"from": self.address, "to": to.lower(), "content": content, "signed_at": signed_at,
                                "signature": signature}
        if reply_to:
            body["reply_to"] = reply_to
        if message_id is None:
            return self._post(body)
        body["nonce"] = message_id
        assert db is not None and turn_id is not None
        sent_log.reserve(db, message_id, turn_id, to, content_hash(content), now_ms)
        try:
            data = self._post(body)
        except RuntimeFailure:  # refused, unreachable or timed out: the turn reports "not sent"; a replay may retry
            sent_log.settle(db, message_id, sent_log.FAILED, self.now())
            raise
        sent_log.settle(db, message_id, sent_log.SENT, self.now(), data["id"])
        return data

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = self._request()("POST", f"{self.url}/v1/messages", json=body, timeout=TIMEOUT_S)
        crash_point("message_sent")
        data = self._answer(answer, "send")
        if not isinstance(data.get("id"), str) or not data["id"]:
            raise RelayError(f"send: the relay answered without a message id: {snippet(answer.body)}", answer.status)
        return data

    def poll(self, cursor: str | None = None, limit: int = POLL_LIMIT) -> PollResult:
        """Messages addressed to this wallet after ``cursor``; the messages are NOT verified here (see intake)."""
        body: dict[str, Any] = {"limit": limit}
        if cursor:
            body["cursor"] = cursor
        answer = self._request()("POST", f"{self.url}/v1/messages/poll", json=body, headers=self._signed_headers(),
                                 timeout=TIMEOUT_S)
        data = self._answer(answer, "poll")
        messages = data.get("messages")
        if not isinstance(messages, list):
            raise RelayError(f"poll: the answer has no messages list: {snippet(answer.body)}", answer.status)
        next_cursor = data.get("next_cursor", data.get("nextCursor"))
        return PollResult([m for m in messages if isinstance(m, dict)] if messages else [],
                          next_cursor if isinstance(next_cursor, str) and next_cursor else None)

    def _signed_headers(self) -> dict[str, str]:
        timestamp, signature = sign_poll(self._wallet, self.now())
        return {"X-Wallet-Address": self.address, "X-Signature": signature, "X-Timestamp": timestamp}

    def _answer(self, answer: "Response", what: str) -> dict[str, Any]:
        if not answer.ok:
            detail = snippet(answer.body)
            try:
                data = answer.json()
                if isinstance(data, dict) and isinstance(data.get("error"), str):
                    detail = data["error"][:200]
            except RuntimeFailure:
                pass
            raise RelayError(f"{what} failed ({answer.status}) at {self.url}: {detail}", answer.status)
        data = _parsed(answer)
        if not isinstance(data, dict):
            raise RelayError(f"{what}: the relay answered {type(data).__name__}, not an object", answer.status)
        return data


def _parsed(answer: "Response") -> Any:
    """The answer's JSON. A relay in JavaScript writes a lone surrogate as ``"\\ud800"``, which orjson refuses and
    the standard library reads: the page is read, and intake drops that one message as malformed."""
    try:
        return answer.json()
    except HttpError:
        with contextlib.suppress(ValueError, RecursionError):  # not JSON either, or nested past the stack
            if not answer.truncated:
                return json.loads(answer.body)
        raise

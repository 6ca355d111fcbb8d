"""Retries with jittered backoff and a per-service circuit breaker, on top of ``net.http.request``.

``ResilientHttp(service).request`` has ``net.http.request``'s call shape (plus ``idempotency_key``, ``retry`` and
``deadline_s``), so its bound method serves as a ``send`` callable. When retries run out on a retryable status the
last ``Response`` is returned (the caller sees the 503 and its body); on a ``NetworkError`` the last one is raised.
``deadline_s`` bounds the whole call: each attempt's timeout is clipped to the time left, and no wait starts that
would end past it.

The breaker counts failed calls, not attempts: a retryable status after its retries, any other 5xx, or a
``NetworkError``. Any other answer (404, 401, 409) comes from the service's own code, so it proves the service up and
closes the breaker, a half-open trial included; 429 alone among 4xx is retried and counts as a failure. A breaker
belongs to the first service that uses it and refuses any other (the reference shared one across services).
"""

from __future__ import annotations

import logging
import math
import random as _random
import threading
import time
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from automaton_min.errors import RuntimeFailure
from automaton_min.net.http import HttpError, NetworkError, Response, header_value, request as plain_request
from automaton_min.log import get_logger

__all__ = [
    "CircuitBreaker", "CircuitOpenError", "BreakerRegistry", "HttpError", "NetworkError", "ResilientHttp",
    "RETRYABLE_STATUSES", "breaker_for", "parse_retry_after",
]

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
IDEMPOTENCY_HEADER = "Idempotency-Key"
MIN_TIMEOUT_S = 0.01

Send = Callable[..., Response]

log = get_logger(__name__)


class CircuitOpenError(RuntimeFailure):
    """A service's circuit breaker is open: the call was refused without sending anything."""

    def __init__(self, service: str, reopens_at: float, retry_in_s: float = 0.0) -> None:
        if retry_in_s > 0:
            when = f"next try in {math.ceil(retry_in_s)} s"
        else:
            when = "a trial call is in progress"
        super().__init__(f"{service} is unavailable after repeated failures (circuit breaker open; {when})")
        self.service = service
        self.reopens_at = reopens_at
        self.retry_in_s = retry_in_s


class CircuitBreaker:
    """Consecutive-failure breaker for ONE service: closed -> open (``open_for_s``) -> half-open (one trial).

    ``now`` returns monotonic seconds. Thread-safe: while a trial call is out, other calls are refused.
    """

    def __init__(self, threshold: int = 5, open_for_s: float = 60.0, *, now: Callable[[], float] = time.monotonic,
                 service: str | None = None) -> None:
        if threshold < 1:
            raise ValueError("threshold must be at least 1")
        if open_for_s <= 0:
            raise ValueError("open_for_s must be positive")
        self.threshold = threshold
        self.open_for_s = open_for_s
        self.service = service
        self._now = now
        self._lock = threading.Lock()
        self._failures = 0
        self._open_until: float | None = None
        self._trial_out = False

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half-open`` (the open period is over; the next call is a trial)."""
        with self._lock:
            if self._open_until is None:
                return "closed"
            return "open" if self._now() < self._open_until and not self._trial_out else "half-open"

    @property
    def failures(self) -> int:
        """The current streak of consecutive failed calls."""
        return self._failures

    def bind(self, service: str) -> None:
        """Claim this breaker for ``service``; ``ValueError`` if it already belongs to another one."""
        with self._lock:
            if self.service is None:
                self.service = service
            elif self.service != service:
                raise ValueError(f"this circuit breaker belongs to {self.service!r}; {service!r} needs its own")

    def acquire(self) -> bool:
        """Admit one call, or raise ``CircuitOpenError``. True when the call is the half-open trial."""
        with self._lock:
            if self._open_until is None:
                return False
            now = self._now()
            if now < self._open_until or self._trial_out:
                raise CircuitOpenError(self.service or "the service", self._open_until,
                                       max(self._open_until - now, 0.0))
            self._trial_out = True
            return True

    def record_success(self) -> None:
        """The service answered: the streak ends and the breaker closes."""
        with self._lock:
            self._failures = 0
            self._open_until = None
            self._trial_out = False

    def record_failure(self) -> bool:
        """One more failed call; True when this opened (or re-opened) the breaker."""
        with self._lock:
            self._failures += 1
            # A half-open breaker still has its streak (>= threshold), so a failed trial re-opens it.
            if self._failures >= self.threshold:
                self._open_until = self._now() + self.open_for_s
                self._trial_out = False
                return True
            return False

    def release(self, trial: bool) -> None:
        """A call ended without an outcome for the service (e.g. a bug raised): free the trial slot if it held it."""
        if trial:
            with self._lock:
                self._trial_out = False


class BreakerRegistry:
    """One ``CircuitBreaker`` per service name, created on first use."""

    def __init__(self, threshold: int = 5, open_for_s: float = 60.0, *,
                 now: Callable[[], float] = time.monotonic) -> None:
        self._make = lambda service: CircuitBreaker(threshold, open_for_s, now=now, service=service)
        self._breakers: dict[str, CircuitBreaker] = {}
        self._lock = threading.Lock()

    def get(self, service: str) -> CircuitBreaker:
        with self._lock:
            if service not in self._breakers:
                self._breakers[service] = self._make(service)
            return self._breakers[service]


_registry = BreakerRegistry()


def breaker_for(service: str) -> CircuitBreaker:
    """The process-wide breaker of ``service`` (every client of the same service shares it)."""
    return _registry.get(service)


def parse_retry_after(value: str | None, wall_now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or HTTP-date); None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(when.timestamp() - wall_now, 0.0)


class ResilientHttp:
    """HTTP calls to one service with retries, backoff and that service's circuit breaker (see the module doc)."""

    def __init__(
        self,
        service: str,
        *,
        breaker: CircuitBreaker | None = None,
        max_retries: int = 3,
        base_delay_s: float = 1.0,
        max_delay_s: float = 30.0,
        timeout_s: float = 30.0,
        deadline_s: float | None = None,
        send: Send = plain_request,
        sleep: Callable[[float], None] | None = None,
        now: Callable[[], float] = time.monotonic,
        random: Callable[[], float] = _random.random,
        wall_now: Callable[[], float] = time.time,
        opened_level: int = logging.WARNING,
    ) -> None:
        if not service:
            raise ValueError("service must be named")
        if max_retries < 0 or base_delay_s < 0 or max_delay_s < 0:
            raise ValueError("max_retries, base_delay_s and max_delay_s must not be negative")
        if timeout_s <= 0 or (deadline_s is not None and deadline_s <= 0):
            raise ValueError("timeout_s and deadline_s must be positive")
        self.service = service
        self.breaker = breaker if breaker is not None else breaker_for(service)
        self.breaker.bind(service)
        self.max_retries = max_retries
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self._send = send
        self._sleep = sleep or _sleep_unless_stopping
        self._now = now
        self._random = random
        self._wall_now = wall_now
        self.opened_level = opened_level  # lower for a service whose outage its caller reports itself

    def backoff(self, retry: int, response: Response | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0-based): Retry-After if given, else jittered exponential."""
        delay = None
        if response is not None:
            delay = parse_retry_after(header_value(response.headers, "Retry-After"), self._wall_now())
        if delay is None:
            delay = self.base_delay_s * (2 ** retry) * (0.5 + self._random())
        return min(delay, self.max_delay_s)

    def request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        idempotency_key: str | None = None,
        retry: bool = True,
        deadline_s: float | None = None,
    ) -> Response:
        """Send with retries; the final ``Response`` (any status), or ``NetworkError`` / ``CircuitOpenError``."""
        method = method.upper()
        all_headers = dict(headers or {})
        if idempotency_key is not None:
            if not idempotency_key:
                raise ValueError("idempotency_key must not be empty")
            all_headers = {k: v for k, v in all_headers.items() if k.lower() != IDEMPOTENCY_HEADER.lower()}
            all_headers[IDEMPOTENCY_HEADER] = idempotency_key
        keyed = bool(header_value(all_headers, IDEMPOTENCY_HEADER))
        per_attempt = self.timeout_s if timeout is None else timeout
        budget = self.deadline_s if deadline_s is None else deadline_s
        started = self._now()

        trial = self.breaker.acquire()
        # A half-open trial is one attempt: the probe must be quick and must not pile retries on a sick service.
        retries = self.max_retries if retry and not trial and (method in SAFE_METHODS or keyed) else 0
        settled = False
        try:
            attempt = 0
            while True:
                timeout_now = per_attempt
                if budget is not None:  # clipped to the time left (never zero: a late sleep must not mean "no timeout")
                    timeout_now = max(min(per_attempt, budget - (self._now() - started)), MIN_TIMEOUT_S)
                response: Response | None = None
                error: NetworkError | None = None
                try:
                    response = self._send(method, url, json=json, headers=all_headers, timeout=timeout_now)
                except NetworkError as exc:
                    if _stopping():  # cut off by the agent's stop: not the service's failure, no retry
                        raise
                    error = exc
                else:
                    if response.status not in RETRYABLE_STATUSES:
                        self._settle(response.status < 500)
                        settled = True
                        return response
                delay = self.backoff(attempt, response)
                # Stop when retries are used up, or when waiting would leave no time for another attempt.
                if attempt >= retries or (budget is not None and (self._now() - started) + delay >= budget):
                    self._settle(False)
                    settled = True
                    if error is None:
                        return response  # type: ignore[return-value]  # the last retryable answer, not hidden
                    if attempt:
                        raise NetworkError(f"{error} ({attempt + 1} attempts)") from None
                    raise error
                attempt += 1
                log.info(
                    "retrying %s %s in %.2f s", method, self.service, delay,
                    extra={"service": self.service, "method": method, "path": urlsplit(url).path, "attempt": attempt,
                           "status": response.status if response is not None else None,
                           "error": type(error).__name__ if error is not None else None, "delay_s": round(delay, 3)},
                )
                self._sleep(delay)
                if _stopping():  # a stop came while waiting: no further attempt
                    if error is not None:
                        raise error
                    return response  # type: ignore[return-value]
        finally:
            if not settled:
                self.breaker.release(trial)

    def _settle(self, ok: bool) -> None:
        if ok:
            self.breaker.record_success()
        elif self.breaker.record_failure():
            # Said when it first opens; a failed trial that opens it again is the same outage.
            log.log(self.opened_level if self.breaker.failures == self.breaker.threshold else logging.DEBUG,
                    "%s circuit breaker opened after %d consecutive failures", self.service, self.breaker.failures,
                    extra={"service": self.service, "open_for_s": self.breaker.open_for_s})


def _stopping() -> bool:
    """Whether the agent is stopping (``net.deadlines``): calls are not retried then."""
    from automaton_min.net.deadlines import WATCH

    return WATCH.stopping.is_set()


def _sleep_unless_stopping(seconds: float) -> None:
    """Wait between attempts; a stop ends the wait at once."""
    from automaton_min.net.deadlines import WATCH

    WATCH.stopping.wait(seconds)

"""Plain HTTP calls with real timeouts and typed errors (retries and circuit breakers build on this).

A timeout is the whole request's: name lookup, connect, headers and body together (``net/deadlines.py``), not
each read's. ``requests`` is imported on first use, so commands that never touch the network stay fast.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import orjson

from automaton_min.errors import RuntimeFailure

DEFAULT_TIMEOUT_S = 30.0
USER_AGENT = "automaton-min"
# No service this agent talks to answers with more; a bigger body is read only this far (a small device must not
# hold a broken or hostile server's gigabytes in memory) and marked ``truncated``, so it fails as a body.
MAX_BODY_BYTES = 16 * 1024 * 1024
_CHUNK = 64 * 1024


class NetworkError(RuntimeFailure):
    """The request did not get an HTTP answer (refused, timed out, DNS, TLS)."""


class HttpError(RuntimeFailure):
    """The server answered with a status the caller did not accept."""

    def __init__(self, message: str, status: int, body: bytes = b"") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


@dataclass
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str = ""
    truncated: bool = False  # the server sent more than MAX_BODY_BYTES; body holds the first MAX_BODY_BYTES + 1
    _json: Any = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        """The body parsed as JSON; ``HttpError`` when it is not JSON."""
        if self._json is None:
            if self.truncated:
                raise HttpError(f"{self.url} answered {self.status} with a body over {MAX_BODY_BYTES:,} bytes",
                                self.status, b"")
            try:
                self._json = orjson.loads(self.body)
            except orjson.JSONDecodeError:
                raise HttpError(f"{self.url} answered {self.status} with a body that is not JSON: "
                                f"{snippet(self.body)}", self.status, self.body) from None
        return self._json


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    """A header by name, case-insensitively (plain dicts do not fold case)."""
    lowered = name.lower()
    for key, value in headers.items():
        if key.lower() == lowered:
            return value
    return None


def snippet(body: bytes, limit: int = 200) -> str:
    """A short, single-line preview of a response body for error messages."""
    text = body.decode("utf-8", "replace").replace("\n", " ").strip()
    return text if len(text) <= limit else text[:limit] + "..."


def request(
    method: str,
    url: str,
    *,
    json: Any = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    finish_at_stop: bool = False,
) -> Response:
    """One HTTP request; raises ``NetworkError`` when the whole answer has not arrived within ``timeout`` seconds,
    or at once when the agent is stopping, unless ``finish_at_stop`` (then within the stop's grace period).
    The body is read up to ``MAX_BODY_BYTES`` (then ``truncated``)."""
    from automaton_min.net.deadlines import WATCH
    from automaton_min.net.session import requests, watched_session

    all_headers = {"User-Agent": USER_AGENT, **(headers or {})}
    data = None
    if json is not None:
        data = orjson.dumps(json)
        all_headers.setdefault("Content-Type", "application/json")
    ends = time.monotonic() + timeout
    try:
        with WATCH.deadline(ends, finish_at_stop=finish_at_stop), watched_session() as session, session.request(
                method, url, data=data, headers=all_headers, timeout=timeout, allow_redirects=False,
                stream=True) as answer:
            body, truncated = _read_capped(answer)
    except requests.Timeout:
        raise NetworkError(f"{method} {url} timed out after {timeout:g} s") from None
    except requests.RequestException as exc:
        if WATCH.cut_now_for(finish_at_stop):
            raise NetworkError(f"{method} {url} was cut off: the agent is stopping") from None
        if time.monotonic() >= ends:  # the watch shut the socket down: the whole request ran out of time
            raise NetworkError(f"{method} {url} timed out after {timeout:g} s (the whole request)") from None
        raise NetworkError(f"{method} {url} failed: {type(exc).__name__}") from None
    return Response(answer.status_code, answer.headers, body, url, truncated)


def request_to_finish(method: str, url: str, **kwargs: Any) -> Response:
    """``request`` for a call whose answer the work under way needs (a model's reply): a stop lets it finish within
    the grace period instead of cutting it at once."""
    return request(method, url, finish_at_stop=True, **kwargs)


def download(url: str, sink: Callable[[bytes], None], *, max_bytes: int, timeout: float) -> int:
    """GET ``url`` and hand its body to ``sink`` chunk by chunk; the number of bytes. ``HttpError`` for a non-2xx
    answer or a body longer than ``max_bytes``; ``NetworkError`` when it fails or takes longer than ``timeout``."""
    from automaton_min.net.deadlines import WATCH
    from automaton_min.net.session import requests, watched_session

    ends, size = time.monotonic() + timeout, 0
    try:
        with WATCH.deadline(ends), watched_session() as session, session.get(
                url, headers={"User-Agent": USER_AGENT}, timeout=timeout, allow_redirects=False, stream=True) as answer:
            if not 200 <= answer.status_code < 300:
                raise HttpError(f"GET {url} answered {answer.status_code}", answer.status_code)
            for chunk in answer.iter_content(_CHUNK):
                size += len(chunk)
                if size > max_bytes:
                    raise HttpError(f"GET {url} sent more than {max_bytes} bytes", answer.status_code)
                sink(chunk)
    except requests.RequestException as exc:
        if time.monotonic() >= ends:
            raise NetworkError(f"GET {url} timed out after {timeout:g} s") from None
        raise NetworkError(f"GET {url} failed: {type(exc).__name__}") from None
    return size


def _read_capped(answer: Any) -> tuple[bytes, bool]:
    chunks, size = [], 0
    for chunk in answer.iter_content(_CHUNK):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return b"".join(chunks)[:MAX_BODY_BYTES + 1], True
    return b"".join(chunks), False


def expect_ok(response: Response, what: str) -> Response:
    """Return ``response`` if it is 2xx, else raise ``HttpError`` naming ``what`` failed."""
    if not response.ok:
        raise HttpError(f"{what}: {response.url} answered {response.status}: {snippet(response.body)}",
                        response.status, response.body)
    return response

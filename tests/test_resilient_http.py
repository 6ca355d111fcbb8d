"""ResilientHttp against real loopback servers, with an injected clock and sleep (no real waiting but one timeout)."""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time
from datetime import datetime, timezone
from email.utils import format_datetime

import pytest

from automaton_min.errors import RuntimeFailure
from automaton_min.net.http import NetworkError, request as plain_request
from automaton_min.net.resilient import (
    BreakerRegistry, CircuitBreaker, CircuitOpenError, ResilientHttp, breaker_for, parse_retry_after,
)
from automaton_min.log import JsonFormatter
from standins.loopback_http import LoopbackServer, Reply, Request

WALL = 1_795_342_530.0  # 2026-11-22T10:15:30Z, the injected wall clock for HTTP-date Retry-After


class FakeTime:
    """Monotonic seconds that move only when the code under test sleeps (or the test advances them)."""

    def __init__(self) -> None:
        self.t = 5_000.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


class Script:
    """A handler answering the given replies in order, then the last one forever."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)

    def __call__(self, request: Request) -> Reply:
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


class Mount:
    """One scripted route on the shared loopback server, under its own path prefix (so tests never see each other)."""

    def __init__(self, server: LoopbackServer, prefix: str, method: str, path: str, handler) -> None:
        self.server, self.prefix, self.method, self.path, self.handler = server, prefix, method, path, handler

    @property
    def url(self) -> str:
        return self.server.url + self.prefix

    @property
    def requests(self) -> list[Request]:
        return [r for r in self.server.requests if r.path.startswith(self.prefix + "/")]

    def __enter__(self) -> "Mount":
        return self

    def __exit__(self, *exc: object) -> None:
        pass


_prefixes = itertools.count()


@pytest.fixture(scope="module")
def loopback():
    """One real HTTP server for the module (starting and stopping one costs about 0.5 s)."""
    mounts: dict[str, Mount] = {}

    def dispatch(request: Request) -> Reply:
        mount = mounts.get("/" + request.path.split("/")[1])
        if mount is None or (mount.method, mount.prefix + mount.path) != (request.method, request.path):
            return Reply(404, {"error": "no such route"})
        return mount.handler(request)

    with LoopbackServer({(m, r"/.*"): dispatch for m in ("GET", "POST", "PUT", "DELETE")}) as server:
        server.mounts = mounts
        yield server


@pytest.fixture
def serve(loopback):
    """``serve(method, path, *replies)`` or ``serve(method, path, handler)``: a fresh route, usable with ``with``."""
    made: list[str] = []

    def mount(method: str, path: str, *replies) -> Mount:
        handler = replies[0] if len(replies) == 1 and not isinstance(replies[0], Reply) else Script(*replies)
        prefix = f"/t{next(_prefixes)}"
        loopback.mounts[prefix] = made_mount = Mount(loopback, prefix, method, path, handler)
        made.append(prefix)
        return made_mount

    yield mount
    for prefix in made:
        del loopback.mounts[prefix]


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


def client(fake: FakeTime, service: str = "conway", *, random: float | None = 0.5, **kwargs) -> ResilientHttp:
    """A client on the fake clock; jitter factor 1.0 unless ``random`` says otherwise (None: real randomness)."""
    breaker = kwargs.pop("breaker", None) or CircuitBreaker(now=fake.now)
    extra = {} if random is None else {"random": lambda: random}
    return ResilientHttp(service, breaker=breaker, sleep=fake.sleep, now=fake.now, wall_now=lambda: WALL, **extra, **kwargs)


def closed_port_url() -> str:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return f"http://127.0.0.1:{port}/v1/x"


# --------------------------------------------------------------------------- what is retried


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_retryable_statuses_are_retried_until_success(fake: FakeTime, status: int, serve) -> None:
    with serve("GET", "/v1/x", Reply(status, {"e": 1}), Reply(status, {"e": 2}), Reply(200, {"ok": True})) as server:
        answer = client(fake).request("GET", server.url + "/v1/x")
    assert (answer.status, answer.json()) == (200, {"ok": True})
    assert len(server.requests) == 3
    assert fake.sleeps == [1.0, 2.0]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
def test_other_4xx_are_answered_once(fake: FakeTime, status: int, serve) -> None:
    with serve("GET", "/v1/x", Reply(status, {"error": "no"}), Reply(200, {"ok": True})) as server:
        answer = client(fake).request("GET", server.url + "/v1/x")
    assert answer.status == status
    assert len(server.requests) == 1
    assert fake.sleeps == []


def test_exhausted_retries_return_the_last_503(fake: FakeTime, serve) -> None:
    replies = [Reply(503, f"busy {n}", {"X-N": str(n)}) for n in range(1, 6)]
    with serve("GET", "/v1/x", *replies) as server:
        answer = client(fake).request("GET", server.url + "/v1/x")
    assert len(server.requests) == 4  # max_retries 3 = 4 attempts
    assert (answer.status, answer.body, answer.headers["X-N"]) == (503, b"busy 4", "4")


def test_retry_false_sends_once(fake: FakeTime, serve) -> None:
    with serve("GET", "/v1/x", Reply(503), Reply(200)) as server:
        answer = client(fake).request("GET", server.url + "/v1/x", retry=False)
    assert answer.status == 503
    assert len(server.requests) == 1 and fake.sleeps == []


def test_max_retries_zero_sends_once(fake: FakeTime, serve) -> None:
    with serve("GET", "/v1/x", Reply(502), Reply(200)) as server:
        assert client(fake, max_retries=0).request("GET", server.url + "/v1/x").status == 502
    assert len(server.requests) == 1


# --------------------------------------------------------------------------- backoff and Retry-After


def test_backoff_doubles_within_the_jitter_bounds(fake: FakeTime, serve) -> None:
    low, high = FakeTime(), FakeTime()
    with serve("GET", "/v1/x", Reply(503)) as server:
        client(low, random=0.0).request("GET", server.url + "/v1/x")
        client(high, random=0.999999).request("GET", server.url + "/v1/x")
        for _ in range(20):
            client(fake, random=None, breaker=CircuitBreaker(threshold=100, now=fake.now)).request("GET", server.url + "/v1/x")
    assert low.sleeps == [0.5, 1.0, 2.0]
    assert high.sleeps == pytest.approx([1.5, 3.0, 6.0], rel=1e-5)
    for n, delay in enumerate(fake.sleeps):
        base = 2 ** (n % 3)
        assert 0.5 * base <= delay < 1.5 * base
    assert len(set(fake.sleeps)) > 3  # really jittered


def test_backoff_is_capped(fake: FakeTime, serve) -> None:
    with serve("GET", "/v1/x", Reply(500)) as server:
        client(fake, base_delay_s=4.0, max_delay_s=10.0, max_retries=4).request("GET", server.url + "/v1/x")
    assert fake.sleeps == [4.0, 8.0, 10.0, 10.0]


@pytest.mark.parametrize(("value", "expected"), [
    ("7", 7.0),
    ("0", 0.0),
    ("120", 30.0),  # capped at max_delay_s
    (format_datetime(datetime.fromtimestamp(WALL + 12, timezone.utc), usegmt=True), 12.0),
    (format_datetime(datetime.fromtimestamp(WALL + 3600, timezone.utc), usegmt=True), 30.0),
    (format_datetime(datetime.fromtimestamp(WALL - 60, timezone.utc), usegmt=True), 0.0),
    ("soon", 1.0),  # unreadable: ordinary backoff
])
def test_retry_after_is_honoured_and_capped(fake: FakeTime, value: str, expected: float, serve) -> None:
    with serve("GET", "/v1/x", Reply(429, {"error": "slow down"}, {"Retry-After": value}), Reply(200)) as server:
        assert client(fake).request("GET", server.url + "/v1/x").status == 200
    assert fake.sleeps == [pytest.approx(expected)]


def test_parse_retry_after() -> None:
    assert parse_retry_after(None, WALL) is None
    assert parse_retry_after(" 3 ", WALL) == 3.0
    assert parse_retry_after("-4", WALL) == 0.0
    assert parse_retry_after("nan", WALL) is None
    assert parse_retry_after("Sun, 22 Nov 2026 10:15:40 GMT", WALL) == pytest.approx(10.0)


# --------------------------------------------------------------------------- mutating calls and idempotency keys


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_mutating_call_without_a_key_is_not_retried(fake: FakeTime, method: str, serve) -> None:
    with serve(method, "/v1/x", Reply(503), Reply(200)) as server:
        answer = client(fake).request(method, server.url + "/v1/x", json={"command": "ls"})
    assert answer.status == 503
    assert len(server.requests) == 1 and fake.sleeps == []


def test_post_with_a_key_is_retried_with_the_same_key(fake: FakeTime, serve) -> None:
    with serve("POST", "/v1/exec", Reply(502), Reply(503), Reply(200, {"exit_code": 0})) as server:
        answer = client(fake).request("POST", server.url + "/v1/exec", json={"command": "ls"}, idempotency_key="01JKEY")
        other = client(fake).request("POST", server.url + "/v1/exec", json={"command": "ls"}, idempotency_key="01JOTHER")
    assert answer.status == 200 and other.status == 200
    keys = [r.headers.get("Idempotency-Key") for r in server.requests]
    assert keys == ["01JKEY", "01JKEY", "01JKEY", "01JOTHER"]
    assert all(r.json() == {"command": "ls"} for r in server.requests)


def test_a_key_in_the_headers_counts_and_the_argument_replaces_it(fake: FakeTime, serve) -> None:
    with serve("POST", "/v1/x", Reply(503), Reply(200)) as server:
        client(fake).request("POST", server.url + "/v1/x", headers={"idempotency-key": "from-headers"})
        client(fake).request("POST", server.url + "/v1/x", headers={"idempotency-key": "old"}, idempotency_key="new")
    keys = [[v for k, v in r.headers.items() if k.lower() == "idempotency-key"] for r in server.requests]
    assert keys == [["from-headers"], ["from-headers"], ["new"]]


def test_a_keyed_post_is_not_retried_on_404(fake: FakeTime, serve) -> None:
    with serve("POST", "/v1/x", Reply(404), Reply(200)) as server:
        assert client(fake).request("POST", server.url + "/v1/x", idempotency_key="k").status == 404
    assert len(server.requests) == 1


# --------------------------------------------------------------------------- network errors and timeouts


def test_connection_refused_is_retried_then_raised(fake: FakeTime) -> None:
    attempts: list[float] = []

    def send(method, url, **kwargs):
        attempts.append(kwargs["timeout"])
        return plain_request(method, url, **kwargs)

    with pytest.raises(NetworkError, match=r"\(4 attempts\)") as caught:
        client(fake, send=send, timeout_s=5.0).request("GET", closed_port_url())
    assert attempts == [5.0] * 4
    assert fake.sleeps == [1.0, 2.0, 4.0]
    assert isinstance(caught.value, RuntimeFailure) and "\n" not in str(caught.value)


def test_network_error_then_success(fake: FakeTime, serve) -> None:
    calls = []
    with serve("GET", "/v1/x", Reply(200, {"ok": 1})) as server:
        def send(method, url, **kwargs):
            calls.append(url)
            return plain_request(method, closed_port_url() if len(calls) == 1 else url, **kwargs)

        assert client(fake, send=send).request("GET", server.url + "/v1/x").json() == {"ok": 1}
    assert len(calls) == 2 and fake.sleeps == [1.0]


@pytest.fixture
def stalled(serve, loopback, monkeypatch):
    """A route whose handler hangs until the test ends; teardown releases it and waits for its threads."""
    release = threading.Event()
    hung: list[threading.Thread] = []

    def hang(request: Request) -> Reply:
        hung.append(threading.current_thread())
        release.wait(10)
        return Reply(200)

    # The released handlers answer clients that gave up long ago; their broken-pipe tracebacks are expected noise.
    monkeypatch.setattr(loopback._server, "handle_error", lambda request, address: None)
    try:
        yield serve("GET", "/slow", hang)
    finally:
        release.set()
        for thread in hung:
            thread.join(5)


def test_a_silent_server_times_out_promptly(fake: FakeTime, stalled: Mount) -> None:
    started = time.monotonic()
    with pytest.raises(NetworkError, match="timed out"):
        client(fake, max_retries=1).request("GET", stalled.url + "/slow", timeout=0.2)
    elapsed = time.monotonic() - started
    assert elapsed < 2.0
    assert len(stalled.requests) == 2  # each attempt really reached the server and was abandoned


def test_deadline_clips_timeouts_and_stops_before_an_overlong_wait(fake: FakeTime, serve) -> None:
    timeouts: list[float] = []

    def send(method, url, **kwargs):
        timeouts.append(kwargs["timeout"])
        return plain_request(method, url, **kwargs)

    with serve("GET", "/v1/x", Reply(503)) as server:
        answer = client(fake, send=send, timeout_s=30.0).request("GET", server.url + "/v1/x", deadline_s=5.0)
    assert answer.status == 503
    assert fake.sleeps == [1.0, 2.0]  # the next wait (4 s) would end past the 5 s deadline
    assert timeouts == [5.0, 4.0, 2.0]


# --------------------------------------------------------------------------- circuit breaker


def test_five_failed_calls_open_the_breaker_then_a_trial_closes_it(fake: FakeTime, serve) -> None:
    script = Script(Reply(503))
    with serve("GET", "/v1/x", script) as server:
        api = client(fake)
        for n in range(1, 5):
            assert api.request("GET", server.url + "/v1/x").status == 503
            assert (api.breaker.failures, api.breaker.state) == (n, "closed")  # one failure per call, not per attempt
        assert len(server.requests) == 16
        api.request("GET", server.url + "/v1/x")
        assert api.breaker.state == "open"
        seen = len(server.requests)

        with pytest.raises(CircuitOpenError) as refused:
            api.request("GET", server.url + "/v1/x")
        assert len(server.requests) == seen
        assert refused.value.service == "conway" and refused.value.retry_in_s == pytest.approx(60.0)
        assert "\n" not in str(refused.value) and "next try in 60 s" in str(refused.value)
        assert isinstance(refused.value, RuntimeFailure)

        fake.t += 59.5
        with pytest.raises(CircuitOpenError):
            api.request("GET", server.url + "/v1/x")
        fake.t += 0.5
        assert api.breaker.state == "half-open"
        script.replies = [Reply(200, {"ok": True})]
        assert api.request("GET", server.url + "/v1/x").status == 200
        assert len(server.requests) == seen + 1
        assert (api.breaker.state, api.breaker.failures) == ("closed", 0)
        assert api.request("GET", server.url + "/v1/x").status == 200


def test_a_failed_trial_reopens_the_breaker_after_one_attempt(fake: FakeTime, serve) -> None:
    with serve("GET", "/v1/x", Reply(500)) as server:
        api = client(fake)
        for _ in range(5):
            api.request("GET", server.url + "/v1/x", retry=False)
        assert api.breaker.state == "open"
        fake.t += 60.0
        seen = len(server.requests)
        sleeps = len(fake.sleeps)
        assert api.request("GET", server.url + "/v1/x").status == 500
        assert len(server.requests) == seen + 1 and len(fake.sleeps) == sleeps  # the trial is a single attempt
        with pytest.raises(CircuitOpenError):
            api.request("GET", server.url + "/v1/x")
        assert len(server.requests) == seen + 1
        fake.t += 60.0
        assert api.breaker.state == "half-open"


def test_network_errors_open_the_breaker(fake: FakeTime) -> None:
    api = client(fake, max_retries=0)
    url = closed_port_url()
    for _ in range(5):
        with pytest.raises(NetworkError):
            api.request("GET", url)
    with pytest.raises(CircuitOpenError):
        api.request("GET", url)


def test_a_4xx_answer_resets_the_streak_and_closes_a_half_open_breaker(fake: FakeTime, serve) -> None:
    script = Script(Reply(503))
    with serve("GET", "/v1/x", script) as server:
        api = client(fake, max_retries=0)
        for _ in range(4):
            api.request("GET", server.url + "/v1/x")
        script.replies = [Reply(404)]
        assert api.request("GET", server.url + "/v1/x").status == 404
        assert api.breaker.failures == 0
        script.replies = [Reply(503)]
        for _ in range(4):
            api.request("GET", server.url + "/v1/x")
        assert api.breaker.state == "closed"
        api.request("GET", server.url + "/v1/x")
        assert api.breaker.state == "open"
        fake.t += 60.0
        script.replies = [Reply(401)]
        assert api.request("GET", server.url + "/v1/x").status == 401
        assert api.breaker.state == "closed"


def test_a_post_without_key_that_gets_503_counts_as_a_failure(fake: FakeTime, serve) -> None:
    with serve("POST", "/v1/x", Reply(503)) as server:
        api = client(fake)
        api.request("POST", server.url + "/v1/x")
    assert api.breaker.failures == 1


def test_two_services_have_independent_breakers(fake: FakeTime, serve) -> None:
    with serve("GET", "/v1/x", Reply(503)) as down, serve("GET", "/v1/x", Reply(200)) as up:
        conway = client(fake, "conway", max_retries=0)
        inference = client(fake, "inference", max_retries=0)
        for _ in range(5):
            conway.request("GET", down.url + "/v1/x")
        with pytest.raises(CircuitOpenError):
            conway.request("GET", up.url + "/v1/x")
        assert inference.request("GET", up.url + "/v1/x").status == 200
        assert inference.breaker.state == "closed"
    assert len(up.requests) == 1


def test_breakers_are_per_service_and_never_shared() -> None:
    registry = BreakerRegistry()
    assert registry.get("conway") is registry.get("conway")
    assert registry.get("conway") is not registry.get("inference")
    assert breaker_for("resilient-test-a") is breaker_for("resilient-test-a")
    assert ResilientHttp("resilient-test-a").breaker is breaker_for("resilient-test-a")
    shared = CircuitBreaker()
    ResilientHttp("conway", breaker=shared)
    ResilientHttp("conway", breaker=shared)  # the same service may have several clients
    with pytest.raises(ValueError, match="belongs to 'conway'"):
        ResilientHttp("social", breaker=shared)


def test_half_open_admits_one_trial_at_a_time(fake: FakeTime) -> None:
    breaker = CircuitBreaker(threshold=1, open_for_s=10.0, now=fake.now, service="conway")
    assert breaker.acquire() is False
    assert breaker.record_failure() is True
    fake.t += 10.0
    assert breaker.acquire() is True
    with pytest.raises(CircuitOpenError, match="trial call is in progress"):
        breaker.acquire()
    breaker.release(True)
    assert breaker.acquire() is True


def test_a_bug_during_the_trial_frees_the_trial_slot(fake: FakeTime) -> None:
    def broken(method, url, **kwargs):
        raise KeyError("bug")

    breaker = CircuitBreaker(threshold=1, open_for_s=10.0, now=fake.now)
    breaker.record_failure()
    fake.t += 10.0
    with pytest.raises(KeyError):
        client(fake, send=broken, breaker=breaker).request("GET", "http://127.0.0.1:9/")
    assert breaker.state == "half-open" and breaker.acquire() is True


# --------------------------------------------------------------------------- logging and messages


@pytest.fixture
def records():
    captured: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    logger = logging.getLogger("automaton_min.net.resilient")
    handler, old_level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield captured
    logger.removeHandler(handler)
    logger.setLevel(old_level)


def test_retries_are_logged_without_headers_or_bodies(fake: FakeTime, records: list[logging.LogRecord], serve) -> None:
    secret = "Bearer cnwy_k_very_secret_value"
    with serve("POST", "/v1/exec", Reply(503), Reply(503)) as server:
        api = client(fake, max_retries=1, breaker=CircuitBreaker(threshold=1, now=fake.now))
        api.request("POST", server.url + "/v1/exec?token=q", json={"command": "cat secret.txt"},
                    headers={"Authorization": secret}, idempotency_key="01JKEY")
    assert server.requests[0].headers["Authorization"] == secret
    retry, opened = records
    assert (retry.service, retry.attempt, retry.status, retry.delay_s, retry.path) == ("conway", 1, 503, 1.0, server.prefix + "/v1/exec")
    assert opened.levelno == logging.WARNING and "opened" in opened.getMessage()
    rendered = "\n".join(JsonFormatter().format(r) for r in records)
    for leak in ("cnwy_k", "Authorization", "secret.txt", "01JKEY", "token=q"):
        assert leak not in rendered


def test_the_breaker_opening_is_said_once_per_outage_at_the_level_the_client_chose(
        fake: FakeTime, records: list[logging.LogRecord]) -> None:
    breaker = CircuitBreaker(threshold=2, open_for_s=10.0, now=fake.now)
    api = client(fake, max_retries=0, breaker=breaker)
    for _ in range(4):  # two failures open it; each failed trial after the open period opens it again
        with pytest.raises(NetworkError):
            api.request("GET", closed_port_url())
        if breaker.state == "open":
            fake.t += 10.0
    assert [r.levelno for r in records if "opened" in r.getMessage()] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    records.clear()
    quiet = client(fake, max_retries=0, breaker=CircuitBreaker(threshold=1, now=fake.now), opened_level=logging.DEBUG)
    with pytest.raises(NetworkError):
        quiet.request("GET", closed_port_url())
    assert [r.levelno for r in records] == [logging.DEBUG]


def test_refused_connection_message_has_no_body_or_auth(fake: FakeTime) -> None:
    with pytest.raises(NetworkError) as caught:
        client(fake, max_retries=0).request("POST", closed_port_url(), json={"pw": "hunter22"}, headers={"Authorization": "k-123456789"})
    assert "hunter22" not in str(caught.value) and "k-123456789" not in str(caught.value)


def test_a_body_past_the_cap_is_read_only_that_far_and_fails_as_a_body(serve, monkeypatch) -> None:
    from automaton_min.net import http
    from automaton_min.net.http import HttpError

    monkeypatch.setattr(http, "MAX_BODY_BYTES", 100_000)  # the real cap is 16 MiB; the behaviour is the same
    with serve("GET", "/big", Reply(200, b'{"a": "' + b"x" * 300_000 + b'"}')) as server:
        answer = plain_request("GET", server.url + "/big")
    assert answer.truncated and len(answer.body) == 100_001  # not the 300 KB the server sent
    with pytest.raises(HttpError, match="over 100,000 bytes"):
        answer.json()
    with serve("GET", "/small", Reply(200, {"a": 1})) as server:
        small = plain_request("GET", server.url + "/small")
    assert not small.truncated and small.json() == {"a": 1}

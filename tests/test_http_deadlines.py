"""Whole-request deadlines (net/deadlines.py): a slow drip, a slow name lookup and a stop each end a request."""

from __future__ import annotations

import socket
import threading

import pytest

from automaton_min.net import deadlines
from automaton_min.net.http import NetworkError, request


class Drip:
    """Headers at once, then one byte of the body per ``every_s``; ``until_cut`` is set when the client hangs up."""

    def __init__(self, size: int = 200, every_s: float = 0.05) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.size, self.every_s = size, every_s
        self.until_cut = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/"

    def serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.recv(65536)
            try:
                conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {self.size}\r\n\r\n".encode())
                for _ in range(self.size):
                    if self.stop.wait(self.every_s):
                        return
                    conn.sendall(b"x")
            except OSError:
                self.until_cut.set()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.listener.close()


def test_a_drip_ends_at_the_whole_requests_deadline() -> None:
    drip = Drip()  # 10 s of body at 0.05 s a byte: every read is quick, the whole is not
    try:
        with pytest.raises(NetworkError, match="the whole request"):
            request("GET", drip.url, timeout=0.5)
        assert drip.until_cut.wait(10), "the server never saw the client hang up"
    finally:
        drip.close()


@pytest.fixture
def watch(monkeypatch) -> deadlines.SocketWatch:
    """A watch of this test's own: a stop must not cut the requests of the tests after it."""
    fresh = deadlines.SocketWatch()
    monkeypatch.setattr(deadlines, "WATCH", fresh)
    return fresh


class Fetch:
    """``request`` in a thread; ``done`` is set when it returns or fails (``error``)."""

    def __init__(self, url: str, **options) -> None:
        self.error: Exception | None = None
        self.done = threading.Event()
        threading.Thread(target=self._run, args=(url, options), daemon=True).start()

    def _run(self, url: str, options: dict) -> None:
        try:
            request("GET", url, timeout=60, **options)
        except NetworkError as exc:
            self.error = exc
        finally:
            self.done.set()


def registered(watch: deadlines.SocketWatch, count: int, fetches: list[Fetch]) -> None:
    while len(watch._heap) < count:  # the requests have their sockets registered
        assert not any(f.done.wait(0.01) for f in fetches)


def test_a_stop_cuts_a_request_at_once_and_lets_one_that_must_finish_run_until_the_grace_ends(watch) -> None:
    cut, kept = Drip(), Drip()
    try:
        plain, finishing = Fetch(cut.url), Fetch(kept.url, finish_at_stop=True)
        registered(watch, 2, [plain, finishing])
        watch.stop()
        assert plain.done.wait(10) and "cut off: the agent is stopping" in str(plain.error)
        assert not finishing.done.is_set() and len(watch._heap) == 1  # still reading its answer
        late = Fetch(cut.url + "late")  # started after the stop: cut as soon as it connects
        assert late.done.wait(10) and "cut off: the agent is stopping" in str(late.error)
        watch.cut_all()
        assert finishing.done.wait(10) and "cut off" in str(finishing.error)
    finally:
        cut.close()
        kept.close()


def test_a_slow_name_lookup_ends_at_the_deadline(monkeypatch) -> None:
    release, answered = threading.Event(), threading.Event()
    real = socket.getaddrinfo

    def slow(*args, **kwargs):
        release.wait(30)
        answered.set()
        return real(*args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    try:
        with pytest.raises(NetworkError):
            request("GET", "http://slow-to-resolve.invalid/", timeout=0.3)
        assert not answered.is_set(), "the request waited for the lookup instead of its deadline"
    finally:
        release.set()


def test_a_stop_ends_the_wait_between_attempts_and_no_retry_follows(watch) -> None:
    from automaton_min.net.resilient import CircuitBreaker, ResilientHttp

    attempts: list[float] = []
    failed_once, done = threading.Event(), threading.Event()
    outcome: list[Exception] = []

    def send(method, url, **kwargs):
        attempts.append(1)
        failed_once.set()
        raise NetworkError("connection refused")

    client = ResilientHttp("svc", send=send, base_delay_s=60, max_delay_s=60, breaker=CircuitBreaker())

    def call() -> None:
        try:
            client.request("GET", "http://127.0.0.1:9/")
        except NetworkError as exc:
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=call, daemon=True).start()
    assert failed_once.wait(10)
    watch.stop()
    assert done.wait(10), "the stop did not end the 60 s wait for a retry"
    assert len(attempts) == 1 and outcome

"""Whole-request deadlines for HTTP: connect, headers and body together, name resolution included (README: Clients).

A socket timeout bounds each read, not the request, and ``getaddrinfo`` ignores it. So connections open through
``net/session.py``'s watched connections, which resolve the name on a reused worker within the time left
(``resolve``) and register each socket with ``SocketWatch``, whose one thread shuts a socket down at its request's
deadline. At a stop, requests that ``finish_at_stop`` end at their own deadline or at ``cut_all``. No HTTP library
is imported here: the daemon holds ``WATCH`` before its first request.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from automaton_min.workers import Workers


class SocketWatch:
    """Shuts sockets down at their request's deadline; ``cut_all`` shuts every watched one down now."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, socket.socket, bool]] = []
        self._numbers = itertools.count()
        self._thread: threading.Thread | None = None
        self._request = threading.local()
        self.stopping = threading.Event()  # set by ``stop``: requests that may be cut are cut, new ones too
        self.abandoned = threading.Event()  # set by ``cut_all``: every request is cut

    @contextmanager
    def deadline(self, at: float, *, finish_at_stop: bool = False) -> Iterator[None]:
        """Connections opened in this thread meanwhile are shut down at ``at`` (a ``time.monotonic()`` value), or at
        a stop unless ``finish_at_stop``."""
        self._request.at, self._request.sockets, self._request.finish = at, [], finish_at_stop
        try:
            yield
        finally:
            with self._cond:
                mine = {id(sock) for sock in self._request.sockets}
                self._heap = [entry for entry in self._heap if id(entry[2]) not in mine]
                heapq.heapify(self._heap)
            self._request.at, self._request.sockets = None, []

    def time_left(self) -> float | None:
        at = getattr(self._request, "at", None)
        return None if at is None else at - time.monotonic()

    def cut_now(self) -> bool:
        """Whether this thread's request under way is to be cut at once (the agent is stopping)."""
        return self.cut_now_for(getattr(self._request, "finish", False))

    def cut_now_for(self, finish_at_stop: bool) -> bool:
        """Whether a request that does (or does not) ask to finish at a stop is cut now."""
        return self.abandoned.is_set() or (self.stopping.is_set() and not finish_at_stop)

    def opened(self, sock: socket.socket) -> None:
        at = getattr(self._request, "at", None)
        if at is None:
            return
        self._request.sockets.append(sock)
        with self._cond:
            heapq.heappush(self._heap, (at, next(self._numbers), sock, self._request.finish))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="http-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()
        if self.cut_now():  # a stop came while this connection was being opened
            _shut(sock)

    def stop(self) -> None:
        """A stop signal: every request that need not finish ends now, and those started later at once."""
        self.stopping.set()
        self._cut(lambda finish: not finish)

    def cut_all(self) -> None:
        """The stop's grace period is over: every request under way ends now, and those started later at once."""
        self.stopping.set()
        self.abandoned.set()
        self._cut(lambda finish: True)

    def _cut(self, which) -> None:
        with self._cond:
            cut = [entry for entry in self._heap if which(entry[3])]
            self._heap = [entry for entry in self._heap if not which(entry[3])]
            heapq.heapify(self._heap)
        for entry in cut:
            _shut(entry[2])

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
                sock = heapq.heappop(self._heap)[2]
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed
        pass


WATCH = SocketWatch()
_resolvers = Workers("http-resolve")


def resolve(host: str, port: int, within: float | None) -> str:
    """``host``'s first address, looked up within ``within`` seconds (``socket.timeout`` past it)."""
    if within is None:
        return host
    if within <= 0:
        raise socket.timeout("no time left to look up " + host)
    done, found = threading.Event(), {}

    def look_up() -> None:
        try:
            found["address"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0]
        except OSError as exc:
            found["error"] = exc

    _resolvers.submit(look_up, done)
    if not done.wait(within):
        raise socket.timeout(f"looking up {host} took longer than the request may")
    if "error" in found:
        raise found["error"]
    return found["address"]

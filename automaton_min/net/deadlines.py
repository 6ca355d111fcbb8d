"""Whole-request deadlines for HTTP: connect, headers and body together, name resolution included.

A socket timeout bounds each read, not the request: a server that sends a byte every few seconds keeps a call
alive for ever, and ``getaddrinfo`` ignores socket timeouts altogether. Here the request's connections are
opened through ``WatchedHTTPConnection`` (and its TLS twin), which resolve the name on a reused worker thread
within the time left and register each socket with ``SocketWatch``: one long-lived thread that shuts a socket
down when its request's deadline passes (the blocked read returns at once), or every watched socket at a stop.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.util import connection as urllib3_connection

from automaton_min.workers import Workers


class SocketWatch:
    """Shuts sockets down at their request's deadline; ``cut_all`` shuts every watched one down now."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, socket.socket]] = []
        self._numbers = itertools.count()
        self._thread: threading.Thread | None = None
        self._request = threading.local()

    @contextmanager
    def deadline(self, at: float) -> Iterator[None]:
        """Connections opened in this thread meanwhile are shut down at ``at`` (a ``time.monotonic()`` value)."""
        self._request.at, self._request.sockets = at, []
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

    def opened(self, sock: socket.socket) -> None:
        at = getattr(self._request, "at", None)
        if at is None:
            return
        self._request.sockets.append(sock)
        with self._cond:
            heapq.heappush(self._heap, (at, next(self._numbers), sock))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="http-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()

    def cut_all(self) -> None:
        """A stop: every request under way ends now."""
        with self._cond:
            entries, self._heap = self._heap, []
        for _, _, sock in entries:
            _shut(sock)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
                _, _, sock = heapq.heappop(self._heap)
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed
        pass


WATCH = SocketWatch()
_resolvers = Workers("http-resolve")


def _resolve(host: str, port: int, within: float | None) -> str:
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


class WatchedHTTPConnection(HTTPConnection):
    """An HTTP connection whose name lookup and socket answer to the request's whole deadline."""

    def _new_conn(self) -> socket.socket:
        address = _resolve(self._dns_host, self.port, WATCH.time_left())
        left = WATCH.time_left()
        timeout = self.timeout if isinstance(self.timeout, (int, float)) else None
        if left is not None:
            timeout = left if timeout is None else min(left, timeout)
        sock = urllib3_connection.create_connection((address, self.port), timeout, source_address=self.source_address,
                                                    socket_options=self.socket_options)
        WATCH.opened(sock)
        return sock


class WatchedHTTPSConnection(WatchedHTTPConnection, HTTPSConnection):
    """The same for HTTPS (the certificate is still checked against the host name)."""


class WatchedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = WatchedHTTPConnection


class WatchedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = WatchedHTTPSConnection


POOLS = {"http": WatchedHTTPConnectionPool, "https": WatchedHTTPSConnectionPool}


class WatchedAdapter(HTTPAdapter):
    """Connections through the watched pools."""

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = POOLS


def watched_session() -> requests.Session:
    """A ``requests`` session whose connections answer to ``WATCH``'s deadlines."""
    session = requests.Session()
    for prefix in ("http://", "https://"):
        session.mount(prefix, WatchedAdapter())
    return session

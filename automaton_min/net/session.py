"""``requests`` sessions whose connections answer to ``net/deadlines.py``'s ``WATCH``: imported on the first
request, so nothing on the way to it loads requests, urllib3 or ssl.

The one-file binary leaves out requests' character-set guessing (charset_normalizer: 3.4 MB and 40 ms at import):
bodies are read as bytes here, never as ``Response.text``, so requests' warning that it is missing is not shown.
"""

from __future__ import annotations

import socket
import warnings

warnings.filterwarnings("ignore", message="Unable to find acceptable character detection dependency")

import requests  # noqa: E402
from requests.adapters import HTTPAdapter  # noqa: E402
from urllib3.connection import HTTPConnection, HTTPSConnection  # noqa: E402
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool  # noqa: E402
from urllib3.util import connection as urllib3_connection  # noqa: E402

from automaton_min.net import deadlines  # noqa: E402 (its WATCH read at each use: a test may put in a watch of its own)


class WatchedHTTPConnection(HTTPConnection):
    """An HTTP connection whose name lookup and socket answer to the request's whole deadline."""

    def _new_conn(self) -> socket.socket:
        address = deadlines.resolve(self._dns_host, self.port, deadlines.WATCH.time_left())
        left = deadlines.WATCH.time_left()
        timeout = self.timeout if isinstance(self.timeout, (int, float)) else None
        if left is not None:
            timeout = left if timeout is None else min(left, timeout)
        sock = urllib3_connection.create_connection((address, self.port), timeout, source_address=self.source_address,
                                                    socket_options=self.socket_options)
        deadlines.WATCH.opened(sock)
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

"""A fault-injecting HTTP front for the loopback stand-ins: ``FaultProxy(upstream)`` forwards every request to the
real stand-in unless a scripted fault is queued, in which case it answers (or fails to answer) on the wire itself.

Faults a plain stand-in cannot produce, because they break HTTP rather than answer it:

* ``Status(code, body, headers)``: any status with any headers (``Retry-After``) and raw body bytes;
* ``Truncated(declared, sent)``: headers promising ``declared`` bytes, ``sent`` bytes of them, then the
  connection is closed (a proxy or server dying mid-answer);
* ``Hold()``: the request is taken and nothing is answered until ``release()`` (a hung server);
* ``Huge(size)``: a 200 whose body is ``size`` bytes (JSON-looking garbage by default, or a given prefix and
  a JSON string padded to ``size``).

``only="/v1/chat/completions"`` faults only requests to that path (others, such as llama.cpp's ``/props``, are
always forwarded). ``proxy.down()`` makes every such request a 503 until ``proxy.up()``; ``proxy.seen`` counts the requests that arrived
(faulted or forwarded); ``proxy.arrivals`` holds their ``time.monotonic()`` for the rare test that needs them.
"""

from __future__ import annotations

import http.client
import socket
import socketserver
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class Status:
    code: int
    body: bytes = b'{"error": {"message": "injected fault", "type": "server_error"}}'
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})


@dataclass
class Truncated:
    declared: int = 4096
    sent: int = 100
    code: int = 200


@dataclass
class Huge:
    size: int = 10 * 1024 * 1024
    body: bytes | None = None  # the full body to send (else ``size`` bytes of a JSON document that never ends)


class Hold:
    """Take the request, answer nothing until released (or ``hold_s`` passes, then close without an answer)."""

    def __init__(self, hold_s: float = 30.0) -> None:
        self.arrived = threading.Event()
        self.released = threading.Event()
        self.hold_s = hold_s

    def release(self) -> None:
        self.released.set()


Fault = Status | Truncated | Huge | Hold


class FaultProxy:
    def __init__(self, upstream: str, *, only: str | None = None) -> None:
        parts = urlsplit(upstream)
        self.only = only
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.faults: deque[Fault] = deque()
        self.seen = 0
        self.arrivals: list[float] = []
        self._down = False
        self._lock = threading.Lock()
        self._holds: list[Hold] = []
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer._serve(self.request)

        class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    # ---- lifecycle
    def __enter__(self) -> "FaultProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for hold in self._holds:
            hold.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # ---- scripting
    def inject(self, *faults: Fault) -> "FaultProxy":
        with self._lock:
            self.faults.extend(faults)
            self._holds += [f for f in faults if isinstance(f, Hold)]
        return self

    def down(self) -> None:
        self._down = True

    def up(self) -> None:
        self._down = False

    # ---- serving
    def _serve(self, sock: socket.socket) -> None:
        request = _read_request(sock)
        if request is None:
            return
        if self.only is not None and request[1].partition("?")[0] != self.only:
            sock.sendall(self._forward(*request))
            return
        with self._lock:
            self.seen += 1
            self.arrivals.append(time.monotonic())
            fault = self.faults.popleft() if self.faults else (Status(503) if self._down else None)
        if fault is None:
            sock.sendall(self._forward(*request))
        elif isinstance(fault, Status):
            sock.sendall(_response(fault.code, fault.body, fault.headers))
        elif isinstance(fault, Truncated):
            body = (b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "' + b"x" * fault.declared)
            head = f"HTTP/1.1 {fault.code} OK\r\nContent-Type: application/json\r\nContent-Length: {fault.declared}\r\n\r\n"
            sock.sendall(head.encode() + body[:fault.sent])
            sock.shutdown(socket.SHUT_RDWR)
        elif isinstance(fault, Huge):
            body = fault.body if fault.body is not None else (b'{"choices": [' + b" " * fault.size)[:fault.size]
            sock.sendall(_response(200, body, {"Content-Type": "application/json"}))
        else:  # Hold
            fault.arrived.set()
            fault.released.wait(fault.hold_s)

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
        connection = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            connection.request(method, path, body=body or None,
                               headers={k: v for k, v in headers.items() if k.lower() not in ("host", "connection")})
            answer = connection.getresponse()
            data = answer.read()
            kept = {k: v for k, v in answer.getheaders()
                    if k.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server")}
            return _response(answer.status, data, kept)
        finally:
            connection.close()


def _read_request(sock: socket.socket) -> tuple[str, str, dict[str, str], bytes] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return method, path, headers, body


def _response(code: int, body: bytes, headers: dict[str, str]) -> bytes:
    reason = http.client.responses.get(code, "Status")
    head = f"HTTP/1.1 {code} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode("latin-1") + body

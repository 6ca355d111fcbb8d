"""A scriptable HTTP server on 127.0.0.1 for stand-ins: routes map (method, path pattern) to handlers."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import orjson


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    match: re.Match | None = None

    def json(self) -> Any:
        return orjson.loads(self.body) if self.body else None


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)

    def encoded(self) -> tuple[bytes, dict[str, str]]:
        headers = dict(self.headers)
        if isinstance(self.body, (bytes, bytearray)):
            return bytes(self.body), headers
        if isinstance(self.body, str):
            headers.setdefault("Content-Type", "text/plain")
            return self.body.encode(), headers
        if self.body is None:
            return b"", headers
        headers.setdefault("Content-Type", "application/json")
        return orjson.dumps(self.body), headers


Handler = Callable[[Request], Reply]


class LoopbackServer:
    """``with LoopbackServer({("POST", r"/v1/x"): handler}) as server: server.url`` -- every request is logged."""

    def __init__(self, routes: dict[tuple[str, str], Handler]) -> None:
        self.routes = [(method, re.compile(pattern), handler) for (method, pattern), handler in routes.items()]
        self.requests: list[Request] = []
        outer = self

        class _Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                path, _, query = self.path.partition("?")
                length = int(self.headers.get("Content-Length") or 0)
                request = Request(self.command, path, query, dict(self.headers.items()), self.rfile.read(length))
                outer.requests.append(request)
                reply = Reply(404, {"error": "not found"})
                for method, pattern, handler in outer.routes:
                    match = pattern.fullmatch(path)
                    if method == self.command and match:
                        request.match = match
                        reply = handler(request)
                        break
                body, headers = reply.encoded()
                self.send_response(reply.status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        # A short shutdown poll keeps a server per test cheap (the default 0.5 s adds up).
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "LoopbackServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

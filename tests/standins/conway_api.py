"""A stand-in for Conway's control-plane API on 127.0.0.1: credits, transfers, sandboxes, models.

It speaks the reference paths exactly, wants the raw key in ``Authorization``
(``Bearer <key>`` is a 401, as is any other key), records every request
(``api.requests``), keeps a little state (balance, sandboxes, files, ports,
transfers by Idempotency-Key), and can be scripted:

* ``api.fail(path, status, body=None, times=None)``: answer ``status`` on that exact
  path (query ignored), for ``times`` requests (``None``: until ``api.clear_faults()``);
  ``body="html"`` sends an HTML error page like a proxy would.
* field-name variants the client must understand, e.g. ``api.balance_field = "credits_cents"``,
  ``api.exit_code_field = "exitCode"``, ``api.port_url_field = "publicUrl"``,
  ``api.read_as = "json"``, ``api.sandboxes_as = "object"``, ``api.models_key = "models"``,
  ``api.transfer_fields = ("id", "new_balance_cents")``.
* ``api.exec_reply = {...}`` or ``api.exec_handler = lambda command, timeout_ms: {...}``.
* Accounts: ``api_key`` is the first account's (``balance_cents``); a wallet that signs in (SIWE, the same endpoints
  as ``conway_auth.ConwayAuth``) gets a key of its own, an account in ``accounts`` (key -> {address, balance_cents})
  with its own balance; a transfer to an account's address moves the credits there (``credited`` by address).
* ``/v1/chat/completions`` (the inference proxy): ``api.chat_handler(body) -> answer``; by default a ``sleep``.
* ``ConwayApi(root=path)``: a sandbox created through the API is a real directory ``root/<id>`` on this machine:
  a file uploaded or read at ``/x/y`` is ``root/<id>/x/y``, and exec commands run for real (``bash -c``, the
  command's own timeout) in ``root/<id>/root``, which is also their HOME (the client's ``cd /root && `` prefix is
  read so). A directory, not a chroot: an absolute path in a command is this machine's.

Use: ``with ConwayApi() as api: client = ConwayClient(api.url, api.api_key)``.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs

from standins.loopback_http import LoopbackServer, Reply, Request

HTML_502 = (
    "<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n<center><h1>502 Bad Gateway</h1></center>\n"
    "<hr><center>nginx</center>\n</body>\n</html>\n"
)


@dataclass
class Fault:
    path: str
    status: int
    body: Any = None
    times: int | None = None


@dataclass
class ConwayApi:
    api_key: str = field(default_factory=lambda: "cnwy_k_" + secrets.token_hex(16))
    balance_cents: int | None = 1234
    balance_field: str = "balance_cents"
    balance_extra: dict[str, Any] = field(default_factory=dict)  # more fields in the balance answer
    exit_code_field: str = "exit_code"
    port_url_field: str = "public_url"
    read_as: str = "text"  # "text" (text/plain body) or "json" ({"content": ...})
    sandboxes_as: str = "array"  # "array" or "object" ({"sandboxes": [...]})
    models_key: str = "data"
    transfer_fields: tuple[str, str] = ("transfer_id", "balance_after_cents")
    models: list[dict[str, Any]] = field(default_factory=lambda: [
        {"id": "gpt-5.2", "owned_by": "openai", "pricing": {"input_per_million": 1.75, "output_per_million": 14.0}},
        {"id": "claude-x", "provider": "anthropic", "pricing": {"input_per_1m_tokens_usd": 3, "output_per_1m_tokens_usd": 15}},
        {"id": "retired", "provider": "openai", "available": False},
        {"id": "bare"},
    ])
    exec_reply: dict[str, Any] | None = None
    exec_handler: Callable[[str, Any], dict[str, Any]] | None = None
    sandboxes: dict[str, dict[str, Any]] = field(default_factory=lambda: {
        "sb-1": {"id": "sb-1", "status": "running", "region": "eu", "vcpu": 1, "memory_mb": 512, "disk_gb": 5,
                 "terminal_url": "https://term.example/sb-1", "created_at": "2026-11-22T10:00:00.000Z"},
    })
    files: dict[tuple[str, str], str] = field(default_factory=dict)
    ports: dict[tuple[str, int], str] = field(default_factory=dict)
    transfers: dict[str, dict[str, Any]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    server: LoopbackServer | None = None
    root: Path | None = None  # set: sandboxes created through the API are directories here, their commands real
    accounts: dict[str, dict[str, Any]] = field(default_factory=dict)  # keys issued by sign-in -> address, balance
    credited: dict[str, int] = field(default_factory=dict)  # lowercase address -> cents received by transfer
    chat_handler: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    auth: Any = None
    deleted: list[str] = field(default_factory=list)  # ids of the sandboxes deleted through the API

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "ConwayApi":
        sandbox = r"/v1/sandboxes/(?P<sid>[^/]+)"
        routes = {
            ("GET", r"/v1/credits/balance"): self._balance,
            ("GET", r"/v1/credits/pricing"): self._pricing,
            ("POST", r"/v1/credits/transfer"): self._transfer,
            ("POST", r"/v1/credits/transfers"): self._transfer,
            ("POST", r"/v1/sandboxes"): self._create,
            ("GET", r"/v1/sandboxes"): self._list,
            ("DELETE", sandbox): self._delete,
            ("POST", sandbox + r"/exec"): self._exec,
            ("GET", sandbox + r"/files/read"): self._read,
            ("POST", sandbox + r"/files/upload/json"): self._write,
            ("POST", sandbox + r"/ports/expose"): self._expose,
            ("DELETE", sandbox + r"/ports/(?P<port>[0-9]+)"): self._remove_port,
            ("GET", r"/v1/models"): self._models,
            ("POST", r"/v1/chat/completions"): self._chat,
        }
        from standins.conway_auth import ConwayAuth

        self.auth = ConwayAuth()
        open_routes = {("POST", "/v1/auth/nonce"): self.auth._nonce, ("POST", "/v1/auth/verify"): self.auth._verify,
                       ("POST", "/v1/auth/api-keys"): self._issue_key}
        self.server = LoopbackServer({**{key: self._guarded(handler) for key, handler in routes.items()},
                                      **open_routes})
        self.auth.server = self.server
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.__exit__(*exc)

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    @property
    def requests(self) -> list[Request]:
        assert self.server is not None
        return self.server.requests

    def requests_to(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path == path]

    # ------------------------------------------------------------------ scripting

    def fail(self, path: str, status: int, body: Any = None, times: int | None = None) -> None:
        self.faults.append(Fault(path, status, body, times))

    def clear_faults(self) -> None:
        self.faults.clear()

    def _fault_for(self, path: str) -> Reply | None:
        for fault in self.faults:
            if fault.path != path:
                continue
            if fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    self.faults.remove(fault)
            if fault.body == "html":
                return Reply(fault.status, HTML_502, {"Content-Type": "text/html"})
            return Reply(fault.status, fault.body if fault.body is not None else {"error": f"scripted {fault.status}"})
        return None

    def _guarded(self, handler: Callable[[Request], Reply]) -> Callable[[Request], Reply]:
        def serve(request: Request) -> Reply:
            key = request.headers.get("Authorization")
            if key != self.api_key and key not in self.accounts:
                return Reply(401, {"error": "invalid API key"})
            return self._fault_for(request.path) or handler(request)
        return serve

    # ------------------------------------------------------------------ handlers

    def _issue_key(self, request: Request) -> Reply:
        reply = self.auth._api_key(request)
        if reply.status == 201:
            token = request.headers.get("Authorization", "").removeprefix("Bearer ")
            address = self.auth.tokens[token]
            self.accounts[reply.body["key"]] = {"address": address,
                                                "balance_cents": self.credited.get(address.lower(), 0)}
        return reply

    def _account(self, request: Request) -> dict[str, Any] | None:
        """The signed-in account the request's key belongs to (``None``: the first account's key)."""
        return self.accounts.get(request.headers.get("Authorization"))

    def _balance(self, request: Request) -> Reply:
        body: dict[str, Any] = {"currency": "USD", **self.balance_extra}
        account = self._account(request)
        cents = account["balance_cents"] if account is not None else self.balance_cents
        if cents is not None:
            body[self.balance_field] = cents
        return Reply(200, body)

    def _chat(self, request: Request) -> Reply:
        from standins.model_servers import openai_answer

        if self.chat_handler is not None:
            return Reply(200, self.chat_handler(request.json() or {}))
        return Reply(200, openai_answer("resting", [("call_0", "sleep", '{"duration_seconds": 3600, '
                                                                         '"reason": "nothing to do"}')]))

    def _pricing(self, request: Request) -> Reply:
        return Reply(200, {"tiers": [{"name": "small", "vcpu": 1, "memory_mb": 512, "disk_gb": 5, "monthly_cents": 500}]})

    def _transfer(self, request: Request) -> Reply:
        key = request.headers.get("Idempotency-Key")
        if not key:
            return Reply(400, {"error": "Idempotency-Key header required"})
        if key in self.transfers:
            return Reply(200, self.transfers[key])
        body = request.json() or {}
        amount = body.get("amount_cents")
        if not isinstance(amount, int) or amount <= 0 or not body.get("to_address"):
            return Reply(400, {"error": "to_address and a positive amount_cents are required"})
        account = self._account(request)
        have = account["balance_cents"] if account is not None else self.balance_cents
        if have is None or amount > have:
            return Reply(402, {"error": "insufficient credits"})
        if account is not None:
            account["balance_cents"] -= amount
        else:
            self.balance_cents -= amount
        to = str(body["to_address"]).lower()
        self.credited[to] = self.credited.get(to, 0) + amount
        for other in self.accounts.values():
            if other["address"].lower() == to:
                other["balance_cents"] += amount
        id_field, balance_field = self.transfer_fields
        result = {id_field: "tr_" + secrets.token_hex(6), "status": "completed", "to_address": body["to_address"],
                  "amount_cents": amount, balance_field: have - amount}
        self.transfers[key] = result
        return Reply(200, result)

    def _create(self, request: Request) -> Reply:
        body = request.json() or {}
        sid = "sb-" + secrets.token_hex(4)
        self.sandboxes[sid] = {"id": sid, "status": "provisioning", "region": body.get("region") or "us-east",
                               "vcpu": body.get("vcpu"), "memory_mb": body.get("memory_mb"), "disk_gb": body.get("disk_gb"),
                               "created_at": "2026-11-22T10:15:30.250Z", "name": body.get("name")}
        if self.root is not None:
            (self.root / sid).mkdir(parents=True)
            self.sandboxes[sid]["status"] = "running"
        return Reply(201, self.sandboxes[sid])

    def directory(self, sid: str) -> Path | None:
        """A directory-backed sandbox's directory (None for a scripted one)."""
        path = self.root / sid if self.root is not None else None
        return path if path is not None and path.is_dir() else None

    def _inside(self, sid: str, path: str) -> Path:
        return self.directory(sid) / path.lstrip("/")

    def _run(self, sid: str, command: str, timeout_ms: Any) -> dict[str, Any]:
        home = self.directory(sid) / "root"
        home.mkdir(exist_ok=True)
        command = command.removeprefix("cd /root && ")
        timeout_s = (timeout_ms / 1000) if isinstance(timeout_ms, (int, float)) and timeout_ms > 0 else 60
        env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        try:
            done = subprocess.run(["bash", "-c", command], cwd=home, env=env, capture_output=True, text=True,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"stdout": "", "stderr": f"timed out after {timeout_s:g} s", "exit_code": 124}
        return {"stdout": done.stdout, "stderr": done.stderr, "exit_code": done.returncode}

    def _list(self, request: Request) -> Reply:
        items = list(self.sandboxes.values())
        return Reply(200, items if self.sandboxes_as == "array" else {"sandboxes": items})

    def _delete(self, request: Request) -> Reply:
        sid = self._known(request)
        if sid is None:
            return Reply(404, {"error": "sandbox not found"})
        del self.sandboxes[sid]
        self.deleted.append(sid)
        return Reply(204)

    def _known(self, request: Request) -> str | None:
        sid = request.match["sid"]
        return sid if sid in self.sandboxes else None

    def _exec(self, request: Request) -> Reply:
        sid = self._known(request)
        if sid is None:
            return Reply(404, {"error": "sandbox not found"})
        if not request.headers.get("Idempotency-Key"):
            return Reply(400, {"error": "Idempotency-Key header required"})
        body = request.json() or {}
        command, timeout = body.get("command"), body.get("timeout")
        if not isinstance(command, str):
            return Reply(400, {"error": "command required"})
        if self.directory(sid) is not None:
            result = self._run(sid, command, timeout)
        elif self.exec_handler is not None:
            result = self.exec_handler(command, timeout)
        elif self.exec_reply is not None:
            result = dict(self.exec_reply)
        else:
            result = {"stdout": f"ran: {command}\n", "stderr": "", "exit_code": 0}
        if "exit_code" in result and self.exit_code_field != "exit_code":
            result[self.exit_code_field] = result.pop("exit_code")
        return Reply(200, result)

    def _read(self, request: Request) -> Reply:
        sid = self._known(request)
        paths = parse_qs(request.query).get("path")
        if sid is not None and paths and self.directory(sid) is not None:
            inside = self._inside(sid, paths[0])
            if not inside.is_file():
                return Reply(404, {"error": "file not found"})
            content = inside.read_text()
            return Reply(200, content) if self.read_as == "text" else Reply(200, {"content": content})
        if sid is None or not paths or (sid, paths[0]) not in self.files:
            return Reply(404, {"error": "file not found"})
        content = self.files[(sid, paths[0])]
        return Reply(200, content) if self.read_as == "text" else Reply(200, {"content": content})

    def _write(self, request: Request) -> Reply:
        sid = self._known(request)
        if sid is None:
            return Reply(404, {"error": "sandbox not found"})
        body = request.json() or {}
        if not isinstance(body.get("path"), str) or not isinstance(body.get("content"), str):
            return Reply(400, {"error": "path and content required"})
        if self.directory(sid) is not None:
            inside = self._inside(sid, body["path"])
            inside.parent.mkdir(parents=True, exist_ok=True)
            inside.write_text(body["content"])
        else:
            self.files[(sid, body["path"])] = body["content"]
        return Reply(200, {"ok": True})

    def _expose(self, request: Request) -> Reply:
        sid = self._known(request)
        port = (request.json() or {}).get("port")
        if sid is None or not isinstance(port, int):
            return Reply(404 if sid is None else 400, {"error": "bad sandbox or port"})
        url = f"https://{port}-{sid}.life.conway.tech"
        self.ports[(sid, port)] = url
        return Reply(200, {"port": port, self.port_url_field: url})

    def _remove_port(self, request: Request) -> Reply:
        sid = self._known(request)
        port = int(request.match["port"])
        if sid is None or (sid, port) not in self.ports:
            return Reply(404, {"error": "port not exposed"})
        del self.ports[(sid, port)]
        return Reply(204)

    def _models(self, request: Request) -> Reply:
        return Reply(200, {self.models_key: self.models})

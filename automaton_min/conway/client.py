"""The Conway control-plane API (README: Clients): credits, transfers, sandboxes (exec, files, ports), models.

Every failure is one ``ConwayError`` line naming the method, path and status, never the key. Unlike the reference,
the client never retries by itself (its ``send`` does: ``conway_send()`` by default), a balance answer without
``balance_cents``/``credits_cents`` is an error, not 0 credits, and ``list_models`` raises when the API fails.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import quote

import orjson

from automaton_min.clock import Clock, from_iso, system_now, to_iso
from automaton_min.conway.local import ExecResult, PortInfo
from automaton_min.conway.sandbox import is_local_sandbox_id
from automaton_min.errors import RuntimeFailure
from automaton_min.ids import new_ulid
from automaton_min.net.http import HttpError, Response, snippet
from automaton_min.log import get_logger, register_secret

if TYPE_CHECKING:
    from automaton_min.store.db import Database

DEFAULT_API_URL = "https://api.conway.tech"
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_EXEC_TIMEOUT_S = 30.0
EXEC_HTTP_MARGIN_S = 30.0  # the HTTP call waits this much longer than the command may run
REMOTE_WORKDIR = "/root"

TRANSFER_PATHS = ("/v1/credits/transfer", "/v1/credits/transfers")

SERVICE = "conway"  # the circuit breaker's name

BALANCE_KEY = "last_known_balance"
BALANCE_REWRITE_MS = 10 * 60 * 1000  # an unchanged balance is written at most this often

log = get_logger(__name__)

Send = Callable[..., Response]


class ConwayError(RuntimeFailure):
    """A Conway API call failed. ``status`` is ``None`` when no HTTP answer arrived."""

    def __init__(self, status: int | None, path: str, message: str) -> None:
        super().__init__(" ".join(message.split()))
        self.status = status
        self.path = path

    @property
    def outage(self) -> bool:
        """True when the service gave no usable answer for reasons on its side (unreachable, 408/429/5xx,
        or a 2xx answer without the expected data), as opposed to a refusal of this request (4xx)."""
        status = self.status
        return status is None or status in (408, 429) or status >= 500 or 200 <= status < 300

    @property
    def unanswered(self) -> bool:
        """True when no HTTP answer arrived at all (refused, timed out, no route, the circuit breaker open)."""
        return self.status is None and isinstance(self.__cause__, RuntimeFailure)


class ExecRefused(ConwayError):
    """The sandbox refused to run a command (403). Nothing ran, here or anywhere else."""


@dataclass(frozen=True)
class TransferResult:
    transfer_id: str
    status: str
    to_address: str
    amount_cents: int
    balance_after_cents: int | None


@dataclass(frozen=True)
class SandboxInfo:
    id: str
    status: str
    region: str
    vcpu: int
    memory_mb: int
    disk_gb: int
    terminal_url: str | None
    created_at: str
    name: str | None = None  # as given at creation (a child's sandbox carries the child's id in it)


@dataclass(frozen=True)
class ModelInfo:
    """A model the Conway inference API offers; prices in USD per million tokens."""

    id: str
    provider: str
    input_per_million: float
    output_per_million: float


@dataclass(frozen=True)
class CreditsReading:
    """A credit balance. ``fresh`` is False when the API could not be read and this is the last known
    value; ``at`` (epoch ms) is when it was read (for a cached value: when it was last stored)."""

    cents: int
    at: int
    fresh: bool
    error: str | None = None


def conway_send(timeout_s: float = DEFAULT_TIMEOUT_S, **options: Any) -> Send:
    """The default ``send``: retries with backoff and the process-wide ``conway`` breaker (``options`` go to
    ``ResilientHttp``: ``breaker``, ``sleep``, ``max_retries`` ...)."""
    from automaton_min.net.resilient import ResilientHttp

    return ResilientHttp(SERVICE, timeout_s=timeout_s, **options).request


def _accepts(func: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _int(value: Any) -> int | None:
    """An integer from a JSON number (``12`` or ``12.0``); ``None`` for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _first(data: dict[str, Any], *names: str) -> Any:
    """The first of ``names`` present and not null (JavaScript's ``a ?? b``)."""
    for name in names:
        if data.get(name) is not None:
            return data[name]
    return None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


class ConwayClient:
    """One API key against one Conway API. Sandbox calls use ``sandbox_id`` (or the one given per call)."""

    def __init__(
        self,
        api_url: str,
        api_key: str,
        *,
        send: Send | None = None,
        now: Clock = system_now,
        sandbox_id: str | None = None,
        db: "Database | None" = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if not api_key:
            raise ValueError("a Conway API key is required")
        self.api_url = api_url.rstrip("/")
        self._api_key = api_key
        register_secret(api_key)
        send = conway_send(timeout_s) if send is None else send
        self.send = send
        self.now = now
        self.sandbox_id = None if is_local_sandbox_id(sandbox_id) else sandbox_id
        self.db = db
        self.timeout_s = timeout_s
        self._send_takes_key = _accepts(send, "idempotency_key")
        self._send_takes_retry = _accepts(send, "retry")
        self._last_good: CreditsReading | None = None

    def __repr__(self) -> str:  # never the key
        return f"ConwayClient({self.api_url!r}, sandbox_id={self.sandbox_id!r})"

    # ------------------------------------------------------------------ plumbing

    def _clean(self, text: str) -> str:
        return text.replace(self._api_key, "[redacted]")

    def _describe(self, response: Response) -> str:
        """A one-line account of an error answer: the JSON ``error``/``message``, an HTML page's title, or a snippet."""
        body = response.body or b""
        content_type = str(response.headers.get("Content-Type") or response.headers.get("content-type") or "")
        if "json" in content_type:
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError:
                data = None
            if isinstance(data, dict):
                detail = _first(data, "error", "message", "detail")
                if isinstance(detail, dict):
                    detail = _first(detail, "message", "code")
                if detail is not None:
                    return str(detail)
        if "html" in content_type or body.lstrip()[:1] == b"<":
            title = _TITLE.search(body)
            return "an HTML page" + (f" ({snippet(title.group(1), 80)})" if title else "")
        return snippet(body) if body else "(empty body)"

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        idempotency_key: str | None = None,
        retry: bool = True,
        timeout: float | None = None,
    ) -> Response:
        """Send one request; return the response, whatever its status. No HTTP answer -> ``ConwayError(None, ...)``."""
        headers = {"Authorization": self._api_key, "Accept": "application/json"}
        kwargs: dict[str, Any] = {"json": json, "headers": headers, "timeout": timeout or self.timeout_s}
        if idempotency_key is not None:
            if self._send_takes_key:
                kwargs["idempotency_key"] = idempotency_key
            else:
                headers["Idempotency-Key"] = idempotency_key
        if not retry and self._send_takes_retry:
            kwargs["retry"] = False
        try:
            return self.send(method, f"{self.api_url}{path}", **kwargs)
        except ConwayError:
            raise
        except RuntimeFailure as exc:  # NetworkError, an open circuit, ...
            raise ConwayError(None, path, self._clean(f"Conway API {method} {path} failed: {exc}")) from exc

    def _error(self, method: str, path: str, response: Response, cls: type[ConwayError] = ConwayError,
               hint: str = "") -> ConwayError:
        message = f"Conway API {method} {path} -> {response.status}: {self._describe(response)}{hint}"
        return cls(response.status, path, self._clean(message))

    def _parse(self, method: str, path: str, response: Response) -> Any:
        """The body of a 2xx answer: JSON when the content type says so, else text."""
        content_type = str(response.headers.get("Content-Type") or response.headers.get("content-type") or "")
        if "application/json" in content_type:
            if not response.body:
                return None
            try:
                return response.json()
            except HttpError:
                raise ConwayError(response.status, path, self._clean(
                    f"Conway API {method} {path} -> {response.status}: the answer is not valid JSON: "
                    f"{snippet(response.body)}"
                )) from None
        return response.body.decode("utf-8", "replace")

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._call(method, path, **kwargs)
        if not response.ok:
            raise self._error(method, path, response)
        return self._parse(method, path, response)

    def _object(self, method: str, path: str, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise ConwayError(200, path, self._clean(
                f"Conway API {method} {path}: expected a JSON object, got {type(data).__name__}"))
        return data

    def _sandbox_path(self, sandbox_id: str | None, rest: str) -> str:
        chosen = sandbox_id if sandbox_id is not None else self.sandbox_id
        if is_local_sandbox_id(chosen):
            raise ConwayError(None, f"/v1/sandboxes/?/{rest}",
                              f"no Conway sandbox id for {rest.split('/')[0]}; this agent runs in local mode")
        return f"/v1/sandboxes/{quote(str(chosen), safe='')}/{rest}"

    # ------------------------------------------------------------------ credits

    def credits_balance(self) -> int:
        """The balance in cents (``balance_cents``, else ``credits_cents``; neither: an error, never 0), kept in KV
        ``last_known_balance`` when there is a ``db``."""
        path = "/v1/credits/balance"
        data = self._object("GET", path, self._request("GET", path))
        raw = _first(data, "balance_cents", "credits_cents")
        cents = _int(raw)
        if cents is None:
            what = ("has no balance_cents or credits_cents" if raw is None
                    else f"has a balance that is not a whole number of cents ({raw!r})")
            raise ConwayError(200, path, f"Conway API GET {path}: the answer {what}")
        self._remember(cents)
        return cents

    def credits(self) -> CreditsReading:
        """The balance, live, or after an outage (no answer, 408/429/5xx, an unusable answer) the last known one
        (``fresh=False``); a refusal such as 401, or an outage with nothing known, propagates."""
        try:
            cents = self.credits_balance()
        except ConwayError as exc:
            if not exc.outage:
                raise
            known = self._last_good
            if self.db is not None:
                stored = cached_credits(self.db)
                if stored is not None and (known is None or stored.at > known.at):
                    known = stored
            if known is None:
                raise
            log.warning("credits API unavailable; using the last known balance",
                        extra={"cents": known.cents, "error": str(exc)})
            return CreditsReading(known.cents, known.at, False, str(exc))
        return CreditsReading(cents, self._last_good.at if self._last_good else self.now(), True)

    def _remember(self, cents: int) -> None:
        now = self.now()
        self._last_good = CreditsReading(cents, now, False)
        if self.db is None:
            return
        stored = cached_credits(self.db)
        if stored is not None and stored.cents == cents and now - stored.at < BALANCE_REWRITE_MS:
            return  # unchanged and recent: spare the SD card
        from automaton_min.store.kv import set_value

        set_value(self.db, BALANCE_KEY, orjson.dumps({"cents": cents, "at": to_iso(now)}).decode(), now)

    def transfer_credits(self, to_address: str, amount_cents: int, note: str | None = None, *,
                         idempotency_key: str | None = None) -> TransferResult:
        """Send credits at most once: ``/v1/credits/transfer``, on a 404 ``/v1/credits/transfers``, one Idempotency-Key
        (``idempotency_key``, or a new one), no retries."""
        if _int(amount_cents) is None or amount_cents <= 0:
            raise ValueError(f"amount_cents must be a positive whole number, got {amount_cents!r}")
        payload: dict[str, Any] = {"to_address": to_address, "amount_cents": int(amount_cents)}
        if note is not None:
            payload["note"] = note
        key = idempotency_key or new_ulid(self.now())
        response = None
        for path in TRANSFER_PATHS:
            response = self._call("POST", path, json=payload, idempotency_key=key, retry=False)
            if response.status != 404:
                break
        assert response is not None
        if not response.ok:
            hint = f" (and {TRANSFER_PATHS[0]} answered 404 too)" if response.status == 404 else ""
            raise self._error("POST", path, response, hint=hint)
        try:
            data = response.json() if response.body else {}
        except HttpError:
            data = {}
        data = data if isinstance(data, dict) else {}
        balance_after = _int(_first(data, "balance_after_cents", "new_balance_cents"))
        reported_amount = _int(data.get("amount_cents"))
        result = TransferResult(
            transfer_id=str(data.get("transfer_id") or data.get("id") or ""),
            status=str(data.get("status") or "submitted"),
            to_address=str(data.get("to_address") or to_address),
            amount_cents=int(amount_cents) if reported_amount is None else reported_amount,
            balance_after_cents=balance_after,
        )
        if balance_after is not None:
            self._remember(balance_after)
        return result

    # ------------------------------------------------------------------ sandboxes

    def exec(self, command: str, timeout_s: float | None = None, *, sandbox_id: str | None = None,
             idempotency_key: str | None = None) -> ExecResult:
        """Run ``command`` in the sandbox (in ``/root``) at most once (``idempotency_key`` or a fresh one, no
        retries); a 403 raises ``ExecRefused``, never a local run instead."""
        timeout = DEFAULT_EXEC_TIMEOUT_S if timeout_s is None else float(timeout_s)
        if timeout <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        path = self._sandbox_path(sandbox_id, "exec")
        body = {"command": f"cd {REMOTE_WORKDIR} && {command}", "timeout": int(timeout * 1000)}
        response = self._call("POST", path, json=body, idempotency_key=idempotency_key or new_ulid(self.now()),
                              retry=False, timeout=timeout + EXEC_HTTP_MARGIN_S)
        if response.status == 403:
            raise self._error("POST", path, response, ExecRefused,
                              "; the sandbox refused the command and it was not run")
        if not response.ok:
            raise self._error("POST", path, response)
        data = self._object("POST", path, self._parse("POST", path, response))
        exit_code = _int(_first(data, "exit_code", "exitCode"))
        return ExecResult(
            stdout=str(data.get("stdout") or ""),
            stderr=str(data.get("stderr") or ""),
            exit_code=-1 if exit_code is None else exit_code,
        )

    def read_file(self, path: str, *, sandbox_id: str | None = None) -> str:
        """The text of a file in the sandbox (the API answers with the text or ``{content}``)."""
        api_path = self._sandbox_path(sandbox_id, "files/read")
        data = self._request("GET", f"{api_path}?path={quote(path, safe='')}")
        if isinstance(data, str):
            return data
        if isinstance(data, dict) and isinstance(data.get("content"), str):
            return data["content"]
        if isinstance(data, dict) and data.get("content") is None:
            return ""
        raise ConwayError(200, api_path, f"Conway API GET {api_path}: the answer has no text content")

    def write_file(self, path: str, content: str, *, sandbox_id: str | None = None) -> None:
        api_path = self._sandbox_path(sandbox_id, "files/upload/json")
        self._request("POST", api_path, json={"path": path, "content": content})

    def expose_port(self, port: int, *, sandbox_id: str | None = None) -> PortInfo:
        api_path = self._sandbox_path(sandbox_id, "ports/expose")
        data = self._object("POST", api_path, self._request("POST", api_path, json={"port": int(port)}))
        url = _first(data, "public_url", "publicUrl", "url")
        if not isinstance(url, str) or not url:
            raise ConwayError(200, api_path, f"Conway API POST {api_path}: the answer has no public_url")
        return PortInfo(_int(data.get("port")) or int(port), url)

    def remove_port(self, port: int, *, sandbox_id: str | None = None) -> None:
        api_path = self._sandbox_path(sandbox_id, f"ports/{int(port)}")
        self._request("DELETE", api_path)

    def create_sandbox(self, name: str, vcpu: int = 1, memory_mb: int = 512, disk_gb: int = 5,
                       region: str | None = None, *, idempotency_key: str | None = None) -> SandboxInfo:
        """One request, never retried: whether Conway deduplicates creation is not known."""
        path = "/v1/sandboxes"
        body: dict[str, Any] = {"name": name, "vcpu": vcpu, "memory_mb": memory_mb, "disk_gb": disk_gb}
        if region is not None:
            body["region"] = region
        data = self._object("POST", path, self._request("POST", path, json=body, idempotency_key=idempotency_key,
                                                        retry=False))
        info = _sandbox_info(data, "running", (vcpu, memory_mb, disk_gb))
        if not info.id:
            raise ConwayError(200, path, f"Conway API POST {path}: the answer has no sandbox id")
        return info

    def delete_sandbox(self, sandbox_id: str) -> None:
        """Delete a sandbox (``DELETE /v1/sandboxes/{id}``); one already gone (404) counts as deleted."""
        path = f"/v1/sandboxes/{quote(sandbox_id, safe='')}"
        response = self._call("DELETE", path, retry=False)
        if not response.ok and response.status != 404:
            raise self._error("DELETE", path, response)

    def list_sandboxes(self) -> list[SandboxInfo]:
        path = "/v1/sandboxes"
        data = self._request("GET", path)
        items = data if isinstance(data, list) else (data.get("sandboxes") if isinstance(data, dict) else None) or []
        return [_sandbox_info(item, "unknown", (0, 0, 0)) for item in items if isinstance(item, dict)]

    # ------------------------------------------------------------------ models

    def list_models(self) -> list[ModelInfo]:
        """Models offered at ``{api}/v1/models`` (``data`` or ``models``), without those marked unavailable."""
        path = "/v1/models"
        data = self._request("GET", path)
        items = data if isinstance(data, list) else (
            _first(data, "data", "models") if isinstance(data, dict) else None) or []
        models = []
        for item in items:
            if not isinstance(item, dict) or item.get("available") is False or not item.get("id"):
                continue
            pricing = item.get("pricing") if isinstance(item.get("pricing"), dict) else {}
            models.append(ModelInfo(
                id=str(item["id"]),
                provider=str(item.get("provider") or item.get("owned_by") or "unknown"),
                input_per_million=_number(_first(pricing, "input_per_million", "input_per_1m_tokens_usd")),
                output_per_million=_number(_first(pricing, "output_per_million", "output_per_1m_tokens_usd")),
            ))
        return models


def _sandbox_info(data: dict[str, Any], default_status: str, defaults: tuple[int, int, int]) -> SandboxInfo:
    vcpu, memory_mb, disk_gb = defaults
    terminal = data.get("terminal_url")
    return SandboxInfo(
        id=str(data.get("id") or data.get("sandbox_id") or ""),
        status=str(data.get("status") or default_status),
        region=str(data.get("region") or ""),
        vcpu=_int(data.get("vcpu")) or vcpu,
        memory_mb=_int(data.get("memory_mb")) or memory_mb,
        disk_gb=_int(data.get("disk_gb")) or disk_gb,
        terminal_url=str(terminal) if terminal else None,
        created_at=str(data.get("created_at") or ""),
        name=str(data["name"]) if data.get("name") else None,
    )


def cached_credits(db: "Database") -> CreditsReading | None:
    """The last good balance stored in KV ``last_known_balance`` (``fresh=False``), or ``None``."""
    from automaton_min.store.kv import get_value

    raw = get_value(db, BALANCE_KEY)
    if raw is None:
        return None
    try:
        data = orjson.loads(raw)
        cents = _int(data["cents"])
        at = from_iso(data["at"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        log.warning("ignoring an unreadable last_known_balance", extra={"value": str(raw)[:80]})
        return None
    if cents is None:
        return None
    return CreditsReading(cents, at, False)

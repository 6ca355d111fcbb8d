"""Asking a model's endpoint, before a run, whether it will work (``doctor`` and the setup wizard's model step). A tiny
completion costs nothing on a local endpoint (a loopback, private or link-local address, ``localhost``, a ``.local``
name, or Ollama); elsewhere callers make it only when the user asks.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from automaton_min.inference.anthropic import DEFAULT_BASE_URL as ANTHROPIC_API
from automaton_min.inference.providers import OPENAI_API, Providers
from automaton_min.inference.refusals import config_fix
from automaton_min.inference.registry import ModelInfo
from automaton_min.inference.server_limits import PROBE_TIMEOUT_S, server_root
from automaton_min.inference.types import ChatRequest, InferenceError, Message
from automaton_min.inference.windows import Window
from automaton_min.net.http import HttpError, Response, request as plain_request

Send = Callable[..., Response]
LOCAL_TOKENS = 1
# A paid endpoint's reasoning models may refuse to stop after one token; a few more cost next to nothing.
PAID_TOKENS = 16
TINY_TIMEOUT_S = 60.0
_PROVIDER_NAMES = {"compatible": "openai-compatible", "ollama": "ollama", "openai": "openai", "anthropic": "anthropic",
                   "conway": "conway"}


@dataclass(frozen=True)
class Endpoint:
    """Where a model is served: the provider kind (``Providers.kind_for``), its base URL, whether it is local."""

    kind: str
    url: str
    local: bool

    @property
    def provider(self) -> str:
        return _PROVIDER_NAMES[self.kind]


@dataclass(frozen=True)
class Listing:
    """The answer to ``GET /v1/models``: its status and the model ids (None when it listed none)."""

    status: int
    ids: tuple[str, ...] | None


def endpoint_for(config: Mapping[str, Any], providers: Providers, model: ModelInfo) -> Endpoint:
    """The endpoint that serves ``model``; ``ModelUnusable`` (with the fix) when none can."""
    kind = providers.kind_for(model)
    url = {"ollama": config.get("ollamaBaseUrl"), "compatible": config.get("openaiBaseUrl"),
           "openai": config.get("openaiBaseUrl") or OPENAI_API, "anthropic": ANTHROPIC_API,
           "conway": config.get("conwayApiUrl")}[kind]
    return Endpoint(kind, url, kind == "ollama" or is_local_url(url))


def is_local_url(url: str) -> bool:
    """Whether ``url``'s host is this machine or the local network."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith((".localhost", ".local")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def list_models(endpoint: Endpoint, config: Mapping[str, Any], send: Send = plain_request) -> Listing:
    """``GET /v1/models`` with the endpoint's key; ``NetworkError`` when it cannot be reached."""
    response = send("GET", f"{server_root(endpoint.url)}/v1/models", headers=_auth(endpoint, config),
                    timeout=PROBE_TIMEOUT_S)
    ids = None
    if response.ok:
        try:
            data = response.json()
        except HttpError:
            data = None
        entries = data.get("data") if isinstance(data, dict) else None
        if isinstance(entries, list):
            ids = tuple(e["id"] for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str))
    return Listing(response.status, ids)


def listing_problem(endpoint: Endpoint, listing: Listing) -> str | None:
    """The fix when the listing was refused for the key (401, 403); other statuses only mean "no list"."""
    return config_fix(endpoint.provider, listing.status) if listing.status in (401, 403) else None


def tiny_completion(providers: Providers, model: ModelInfo, endpoint: Endpoint) -> int:
    """One chat request with a one-line prompt and a few output tokens; its time in ms. Raises
    ``InferenceError`` (``ModelUnusable`` with the fix, ``ProviderUnreachable``, ...) as a turn would."""
    tokens = LOCAL_TOKENS if endpoint.local else PAID_TOKENS
    started = time.monotonic()
    providers.provider_for(model).chat(ChatRequest(model.model_id, (Message("user", "Say OK."),), tokens,
                                                   timeout_s=TINY_TIMEOUT_S))
    return int((time.monotonic() - started) * 1000)


def _auth(endpoint: Endpoint, config: Mapping[str, Any]) -> dict[str, str]:
    if endpoint.kind == "anthropic":
        return {"x-api-key": config.get("anthropicApiKey") or "", "anthropic-version": "2023-06-01"}
    if endpoint.kind == "conway":
        return {"Authorization": config.get("conwayApiKey") or ""}
    key = config.get("openaiApiKey") if endpoint.kind in ("compatible", "openai") else None
    return {"Authorization": f"Bearer {key}"} if key else {}


@dataclass(frozen=True)
class Trial:
    """What the setup wizard found out about a model on an OpenAI-compatible server."""

    local: bool
    answered_ms: int | None  # None: not tried (it may charge) or it failed (``error``)
    error: str | None
    window: Window | None


def server_models(base_url: str, api_key: str | None, send: Send = plain_request) -> tuple[str, ...] | None:
    """The model ids an OpenAI-compatible server lists, or None when it lists none; ``NetworkError`` when it
    does not answer."""
    return list_models(Endpoint("compatible", base_url, is_local_url(base_url)), {"openaiApiKey": api_key}, send).ids


def try_model(base_url: str, api_key: str | None, model_id: str, send: Send = plain_request) -> Trial:
    """One tiny request (on a local server only) and the window the server says, for ``model_id``."""
    config = {"openaiBaseUrl": base_url, "openaiApiKey": api_key}
    providers = Providers(config, lambda service: send, probe=send)
    model = ModelInfo(model_id, "openai-compatible", model_id)
    endpoint = endpoint_for(config, providers, model)
    answered_ms, error = None, None
    if endpoint.local:
        try:
            answered_ms = tiny_completion(providers, model, endpoint)
        except InferenceError as exc:
            error = str(exc)
    return Trial(endpoint.local, answered_ms, error, providers.context_window(model))

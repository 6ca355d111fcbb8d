"""Asking a local model server how much context it gives a model (README: Clients, Model registry).

llama.cpp's ``n_ctx`` is one slot's (some builds put it at the top of ``/props``); vLLM is asked with the key if it
wants one; Ollama's ``OLLAMA_CONTEXT_LENGTH`` is not reported (``modelStrategy.contextWindow`` then). ``root`` is the
base URL without ``/v1``. Each function answers ``None`` when the server does not say, and raises ``NetworkError``
when it could not be asked.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from automaton_min.net.http import HttpError, Response

OLLAMA_DEFAULT_CONTEXT = 4096
PROBE_TIMEOUT_S = 5.0

Send = Callable[..., Response]
_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def server_root(base_url: str) -> str:
    """``http://host:port[/prefix]`` from a base URL given with or without ``/v1`` or ``/v1/chat/completions``."""
    url = base_url.strip().rstrip("/")
    for suffix in ("/chat/completions", "/v1"):
        if url.endswith(suffix):
            url = url[: -len(suffix)].rstrip("/")
    return url


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _json(response: Response) -> dict[str, Any] | None:
    if not response.ok:
        return None
    try:
        data = response.json()
    except HttpError:
        return None
    return data if isinstance(data, dict) else None


def list_models(base_url: str, send: Send, headers: dict[str, str] | None = None) -> list[dict[str, Any]] | None:
    """The entries of ``GET {root}/v1/models`` (each has an ``id``), or None when the server lists none."""
    data = _json(send("GET", f"{server_root(base_url)}/v1/models", headers=headers or {}, timeout=PROBE_TIMEOUT_S))
    entries = data.get("data") if data is not None else None
    if not isinstance(entries, list):
        return None
    return [entry for entry in entries if isinstance(entry, dict) and isinstance(entry.get("id"), str)]


def vllm_context(base_url: str, model: str, send: Send, headers: dict[str, str] | None = None) -> int | None:
    """``max_model_len`` of ``model``'s entry in vLLM's ``GET /v1/models``."""
    entry = next((e for e in list_models(base_url, send, headers) or [] if e["id"] == model), None)
    return _positive(entry.get("max_model_len")) if entry is not None else None


def llamacpp_context(base_url: str, send: Send) -> int | None:
    """The context one request gets on a llama.cpp server, from ``GET /props``."""
    data = _json(send("GET", f"{server_root(base_url)}/props", timeout=PROBE_TIMEOUT_S))
    if data is None:
        return None
    settings = data.get("default_generation_settings")
    from_settings = _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None
    return from_settings or _positive(data.get("n_ctx"))


def ollama_context(base_url: str, model: str, send: Send) -> int | None:
    """The context Ollama runs ``model`` with, from ``POST /api/show`` (README: Clients, model registry)."""
    data = _json(send("POST", f"{server_root(base_url)}/api/show", json={"model": model}, timeout=PROBE_TIMEOUT_S))
    if data is None:
        return None
    parameters = data.get("parameters")
    if isinstance(parameters, str):
        match = _NUM_CTX.search(parameters)
        if match and int(match.group(1)) > 0:
            return int(match.group(1))
    info = data.get("model_info")
    if not isinstance(info, dict):
        return None
    architecture = info.get("general.architecture")
    trained = _positive(info.get(f"{architecture}.context_length")) if isinstance(architecture, str) else None
    if trained is None:
        trained = next((_positive(v) for k, v in info.items() if k.endswith(".context_length") and _positive(v)), None)
    return min(trained, OLLAMA_DEFAULT_CONTEXT) if trained else None

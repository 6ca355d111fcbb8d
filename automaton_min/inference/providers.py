"""Which provider serves a model (README: Clients), and the ``chat`` hook the router calls.

First match wins: Ollama (with ``ollamaBaseUrl``); Anthropic (its provider or a ``claude-*`` model, with
``anthropicApiKey``); ``openaiBaseUrl`` (the user's own model, or any model not OpenAI's, Anthropic's or Conway's);
OpenAI (with ``openaiApiKey``); the Conway proxy with the raw key; else ``openaiBaseUrl`` for any model. Each
provider has its own circuit breaker.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol

from automaton_min.ids import new_ulid
from automaton_min.clock import system_now
from automaton_min.inference.anthropic import AnthropicProvider
from automaton_min.inference.openai_compat import OpenAICompatibleProvider
from automaton_min.inference.registry import ModelInfo
from automaton_min.inference.types import ChatRequest, ChatResult, ModelUnusable
from automaton_min.inference.windows import Window
from automaton_min.net.http import NetworkError, Response, request as plain_request, request_to_finish
from automaton_min.log import get_logger

Send = Callable[..., Response]
log = get_logger(__name__)
OPENAI_API = "https://api.openai.com"


class Provider(Protocol):
    def chat(self, request: ChatRequest) -> ChatResult: ...


def resilient_send(service: str) -> Send:
    """A send for ``service`` with retries and its own breaker; one idempotency key per call. The call's
    ``timeout`` (the request's ``timeout_s``, the task's deadline) bounds all its attempts together."""
    from automaton_min.net.resilient import ResilientHttp

    client = ResilientHttp(service, timeout_s=120.0, send=request_to_finish)  # a stop lets a model answer finish

    def send(method: str, url: str, **kwargs: Any) -> Response:
        deadline = kwargs.get("timeout")
        return client.request(method, url, idempotency_key=new_ulid(system_now()), deadline_s=deadline, **kwargs)

    return send


class Providers:
    """Resolves models to providers (built once each) and serves as the router's ``chat`` hook."""

    def __init__(self, config: Mapping[str, Any], send_for: Callable[[str], Send] = resilient_send, *,
                 probe: Send = plain_request) -> None:
        self.config = config
        self.send_for = send_for
        self.probe = probe  # one plain attempt for the context-window questions, no retries
        self._built: dict[str, Provider] = {}
        self._windows: dict[str, Window | None] = {}

    def __call__(self, model: ModelInfo, request: ChatRequest) -> ChatResult:
        return self.provider_for(model).chat(request)

    def provider_for(self, model: ModelInfo) -> Provider:
        kind = self.kind_for(model)
        if kind not in self._built:
            self._built[kind] = self._build(kind)
        return self._built[kind]

    def context_window(self, model: ModelInfo) -> Window | None:
        """The context a local server gives ``model``, and which question told it (llama.cpp ``/props``, vLLM's
        ``/v1/models``, Ollama's ``/api/show``), or None when it is not a local server or it does not say.
        Answers are remembered; an unreachable server is asked again next time."""
        if model.model_id in self._windows:
            return self._windows[model.model_id]
        try:
            kind = self.kind_for(model)
        except ModelUnusable:
            return None  # the call itself will say so, with the fix
        try:
            window = self._ask_window(kind, model.model_id)
        except NetworkError as exc:
            log.info("could not ask the model server for its context size",
                     extra={"model": model.model_id, "error": str(exc)})
            return None
        self._windows[model.model_id] = window
        if window:
            log.info("context size from the model server",
                     extra={"model": model.model_id, "context_tokens": window.tokens, "source": window.source})
        return window

    def _ask_window(self, kind: str, model_id: str) -> Window | None:
        from automaton_min.inference.server_limits import llamacpp_context, ollama_context, vllm_context

        if kind == "ollama":
            tokens = ollama_context(self.config.get("ollamaBaseUrl"), model_id, self.probe)
            return Window(tokens, "the server (Ollama's /api/show)") if tokens else None
        if kind != "compatible":
            return None
        base = self.config.get("openaiBaseUrl")  # llama.cpp, vLLM, or Ollama's /v1 given as openaiBaseUrl
        questions = (("llama.cpp's /props", lambda: llamacpp_context(base, self.probe)),
                     ("vLLM's max_model_len in /v1/models",
                      lambda: vllm_context(base, model_id, self.probe, self.auth())),
                     ("Ollama's /api/show", lambda: ollama_context(base, model_id, self.probe)))
        for name, ask in questions:
            tokens = ask()
            if tokens:
                return Window(tokens, f"the server ({name})")
        return None

    def auth(self) -> dict[str, str]:
        """The header an OpenAI-compatible server (``openaiBaseUrl``) wants, if a key is set."""
        key = self.config.get("openaiApiKey")
        return {"Authorization": f"Bearer {key}"} if key else {}

    def kind_for(self, model: ModelInfo) -> str:
        """``ollama``, ``anthropic``, ``compatible``, ``openai`` or ``conway`` (the rules in the module doc)."""
        get = self.config.get
        is_anthropic = model.provider == "anthropic" or model.model_id.lower().startswith("claude")
        if model.provider == "ollama" and get("ollamaBaseUrl"):
            return "ollama"
        if is_anthropic and get("anthropicApiKey"):
            return "anthropic"
        if get("openaiBaseUrl") and (model.provider == "openai-compatible"
                                     or model.provider not in ("openai", "anthropic", "conway")):
            return "compatible"
        if model.provider == "openai" and get("openaiApiKey"):
            return "openai"
        if get("conwayApiKey"):
            return "conway"
        if get("openaiBaseUrl"):
            return "compatible"  # nothing else can serve it, and one's own server answers to any name
        raise ModelUnusable(
            f"no provider can serve {model.model_id}: set openaiBaseUrl, openaiApiKey or anthropicApiKey, "
            "or provision a Conway key (automaton-min provision)"
        )

    def _build(self, kind: str) -> Provider:
        get = self.config.get
        send = self.send_for(f"inference-{kind}")
        if kind == "ollama":
            return OpenAICompatibleProvider(get("ollamaBaseUrl"), "ollama", provider_name="ollama", send=send)
        if kind == "anthropic":
            version = (get("modelStrategy") or {}).get("anthropicApiVersion") or "2023-06-01"
            return AnthropicProvider(get("anthropicApiKey"), api_version=version, send=send)
        if kind == "compatible":
            return OpenAICompatibleProvider(get("openaiBaseUrl"), get("openaiApiKey"),
                                            provider_name="openai-compatible", send=send)
        if kind == "openai":
            return OpenAICompatibleProvider(get("openaiBaseUrl") or OPENAI_API, get("openaiApiKey"),
                                            provider_name="openai", send=send)
        return OpenAICompatibleProvider(get("conwayApiUrl"), get("conwayApiKey"), provider_name="conway",
                                        auth_style="raw", send=send)

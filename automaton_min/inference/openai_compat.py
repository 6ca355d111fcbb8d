"""OpenAI chat completions (``POST {base}/v1/chat/completions``), as OpenAI, the Conway proxy, Ollama, llama.cpp, vLLM
and other compatible servers speak them. No streaming.

OpenAI's reasoning-era models refuse ``max_tokens`` and want ``max_completion_tokens``, which other servers do not
know; it is sent to OpenAI and to the Conway proxy (which forwards to OpenAI, as the reference did).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from automaton_min.inference.types import ChatRequest, ChatResult, Message, ProviderError, ToolCall, ToolSchema, Usage
from automaton_min.inference.wire_common import (
    Send,
    arguments_text,
    int_or_none,
    parse_arguments,
    post_json,
    redact,
    repair_tool_pairing,
    require_messages,
    unique_call_ids,
)
from automaton_min.net.http import request_to_finish
from automaton_min.log import register_secret

MAX_COMPLETION_TOKENS_MODELS = re.compile(r"^(o[1-9]|gpt-5|gpt-4\.1)", re.IGNORECASE)
MAX_COMPLETION_TOKENS_PROVIDERS = frozenset({"openai", "conway"})
AUTH_STYLES = ("bearer", "raw")


def token_limit_field(model: str, provider_name: str) -> str:
    """``"max_completion_tokens"`` or ``"max_tokens"``: which body field carries the output-token cap."""
    if provider_name.lower() in MAX_COMPLETION_TOKENS_PROVIDERS and MAX_COMPLETION_TOKENS_MODELS.match(model.strip()):
        return "max_completion_tokens"
    return "max_tokens"


def chat_completions_url(base_url: str) -> str:
    """The chat-completions endpoint for a server's root, given with or without ``/v1`` or a pasted endpoint URL."""
    url = base_url.strip().rstrip("/")
    if url.endswith("/chat/completions"):
        url = url[: -len("/chat/completions")].rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3].rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"an OpenAI-compatible base URL must be http:// or https:// with a host, not {base_url!r}")
    return url + "/v1/chat/completions"


def message_to_wire(message: Message) -> dict[str, Any]:
    """One neutral message as an OpenAI chat message."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    wire: dict[str, Any] = {"role": message.role, "content": message.content or ""}
    if message.name:
        wire["name"] = message.name
    if message.role == "assistant" and message.tool_calls:
        # content stays "" (never null): llama.cpp answers 500 to null content next to tool_calls
        wire["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments_text(call)}}
            for call in message.tool_calls
        ]
    return wire


def tool_to_wire(tool: ToolSchema) -> dict[str, Any]:
    return {"type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters}}


def build_body(request: ChatRequest, provider_name: str) -> dict[str, Any]:
    """The JSON body of a chat-completions request."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [message_to_wire(message) for message in repair_tool_pairing(request.messages)],
        "stream": False,
        token_limit_field(request.model, provider_name): request.max_tokens,
    }
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.seed is not None:
        body["seed"] = request.seed
    if request.tools:
        body["tools"] = [tool_to_wire(tool) for tool in request.tools]
        body["tool_choice"] = ({"type": "function", "function": {"name": request.tool_choice}} if request.tool_choice
                               else "auto")
    return body


def _content_text(value: Any) -> str:
    """``message.content``: a string, null (-> ""), or a list of content parts (text parts joined)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = [part.get("text") for part in value if isinstance(part, dict)]
        return "".join(text for text in texts if isinstance(text, str))
    return ""


def _tool_calls(entries: Any) -> tuple[ToolCall, ...]:
    if not isinstance(entries, list):
        return ()
    entries = [entry for entry in entries if isinstance(entry, dict)]
    ids = unique_call_ids([entry.get("id") for entry in entries])
    calls = []
    for call_id, entry in zip(ids, entries, strict=True):
        function = entry.get("function") if isinstance(entry.get("function"), dict) else {}
        name = function.get("name") if isinstance(function.get("name"), str) else ""
        arguments, raw, error = parse_arguments(function.get("arguments"))
        if not name:
            error = "the tool call has no function name" + (f"; {error}" if error else "")
        calls.append(ToolCall(id=call_id, name=name, arguments=arguments, raw_arguments=raw, argument_error=error))
    return tuple(calls)


def parse_chat_completion(body: Any, provider_name: str, model: str = "") -> ChatResult:
    """A chat-completions answer as a ``ChatResult``: null content is "", parts are joined, a refusal alone is the
    text, missing usage ``Usage(None, None)``, finish_reason "stop". No choice with a message: ``ProviderError``."""
    if not isinstance(body, dict):
        raise ProviderError(f"inference error ({provider_name}): the answer is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        error = body.get("error")
        detail = ""
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            detail = f": {error['message'][:200]}"
        raise ProviderError(f"inference error ({provider_name}): the answer has no choices{detail}")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise ProviderError(f"inference error ({provider_name}): the answer's first choice has no message")
    content = _content_text(message.get("content"))
    if not content and isinstance(message.get("refusal"), str):
        content = message["refusal"]
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    finish = choice.get("finish_reason")
    return ChatResult(
        content=content,
        tool_calls=_tool_calls(message.get("tool_calls")),
        usage=Usage(int_or_none(usage.get("prompt_tokens")), int_or_none(usage.get("completion_tokens"))),
        finish_reason=finish if isinstance(finish, str) and finish else "stop",
        model=body.get("model") if isinstance(body.get("model"), str) and body.get("model") else model,
        provider=provider_name,
    )


class OpenAICompatibleProvider:
    """Chat completions against one OpenAI-compatible server. ``auth_style``: ``"bearer"`` (``Bearer <key>``) or
    ``"raw"`` (the Conway proxy); no key, no header. The key is never in a repr or an error; the scrubber knows it."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        provider_name: str = "openai",
        auth_style: str = "bearer",
        send: Send = request_to_finish,
    ) -> None:
        if auth_style not in AUTH_STYLES:
            raise ValueError(f"auth_style must be one of {', '.join(AUTH_STYLES)}, not {auth_style!r}")
        self.base_url = base_url
        self.url = chat_completions_url(base_url)
        self.provider_name = provider_name
        self.auth_style = auth_style
        self._api_key = api_key or None
        self._send = send
        if self._api_key:
            register_secret(self._api_key)

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"OpenAICompatibleProvider(provider_name={self.provider_name!r}, url={self.url!r}, api_key={key})"

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}" if self.auth_style == "bearer" else self._api_key
        return headers

    def chat(self, request: ChatRequest) -> ChatResult:
        """One chat completion; ``ProviderError`` for error statuses and unusable answers,
        ``ProviderUnreachable`` when no answer came, ``InferenceError`` for an empty message list."""
        require_messages(request.messages, self.provider_name)
        body = post_json(self._send, self.provider_name, self.url, build_body(request, self.provider_name),
                         self.headers(), request.timeout_s, (self._api_key,))
        try:
            return parse_chat_completion(body, self.provider_name, request.model)
        except ProviderError as exc:
            raise ProviderError(redact(str(exc), (self._api_key,)), exc.status) from None

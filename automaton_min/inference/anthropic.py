"""Anthropic messages (``POST {base}/v1/messages``), no streaming.

The neutral conversation is reshaped as the API insists: the system texts on top, tool calls paired with results
(``wire_common.repair_tool_pairing``), roles alternating (neighbours merged), a user message first, no empty text
block. An answer with neither text nor tool calls is a valid empty result.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from automaton_min.inference.types import ChatRequest, ChatResult, Message, ProviderError, ToolCall, ToolSchema, Usage
from automaton_min.inference.wire_common import (
    Send,
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

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_API_VERSION = "2023-06-01"
PROVIDER_NAME = "anthropic"
OPENING_USER_TEXT = "Continue."
STOP_REASONS = {"tool_use": "tool_calls", "end_turn": "stop", "max_tokens": "length"}
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def messages_url(base_url: str) -> str:
    """``{base}/v1/messages`` for a base given with or without ``/v1`` (trailing slashes ignored)."""
    url = base_url.strip().rstrip("/")
    if url.endswith("/v1/messages"):
        url = url[: -len("/v1/messages")]
    if url.endswith("/v1"):
        url = url[:-3].rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"an Anthropic base URL must be http:// or https:// with a host, not {base_url!r}")
    return url + "/v1/messages"


def wire_id(call_id: str | None) -> str:
    """A tool-call id as Anthropic accepts it (``^[A-Za-z0-9_-]+$``), the same for ``tool_use`` and ``tool_result``,
    so ids from other providers survive a switch to Anthropic."""
    return _ID_UNSAFE.sub("_", call_id or "") or "call"


def _text_block(text: str) -> list[dict[str, Any]]:
    # The API refuses an empty or whitespace-only text block; a message left with none is dropped.
    return [{"type": "text", "text": text}] if text.strip() else []


def _blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "tool":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": wire_id(message.tool_call_id)}
        if message.content:
            block["content"] = message.content
        return "user", [block]
    if message.role == "assistant":
        blocks = _text_block(message.content)
        blocks += [{"type": "tool_use", "id": wire_id(call.id), "name": call.name, "input": dict(call.arguments)}
                   for call in message.tool_calls]
        return "assistant", blocks
    return "user", _text_block(message.content)


def transform_messages(messages: tuple[Message, ...]) -> tuple[str, list[dict[str, Any]]]:
    """``(system, messages)`` for the messages API; an empty list is an ``InferenceError``."""
    require_messages(messages, PROVIDER_NAME)
    repaired = repair_tool_pairing(messages)
    system = "\n\n".join(m.content for m in repaired if m.role == "system" and m.content.strip())
    turns: list[dict[str, Any]] = []
    for message in repaired:
        if message.role == "system":
            continue
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            # Repaired results directly follow their call, so a turn's tool_result blocks lead the merged user
            # message, as the API requires.
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": OPENING_USER_TEXT}]})
    last = turns[-1]  # the API refuses trailing whitespace in a final assistant message
    if last["role"] == "assistant" and last["content"][-1]["type"] == "text":
        last["content"][-1]["text"] = last["content"][-1]["text"].rstrip()
    return system, turns


def tool_to_wire(tool: ToolSchema) -> dict[str, Any]:
    schema = dict(tool.parameters)
    schema.setdefault("type", "object")
    return {"name": tool.name, "description": tool.description, "input_schema": schema}


def build_body(request: ChatRequest) -> dict[str, Any]:
    """The JSON body of a messages request."""
    system, messages = transform_messages(request.messages)
    body: dict[str, Any] = {"model": request.model, "max_tokens": request.max_tokens, "messages": messages}
    if system:
        body["system"] = system
    if request.temperature is not None:
        body["temperature"] = min(1.0, max(0.0, float(request.temperature)))
    if request.tools:
        body["tools"] = [tool_to_wire(tool) for tool in request.tools]
        body["tool_choice"] = {"type": "tool", "name": request.tool_choice} if request.tool_choice else {"type": "auto"}
    return body


def parse_message(body: Any, model: str = "") -> ChatResult:
    """A messages answer as a ``ChatResult``; input tokens include the cache's when reported."""
    if not isinstance(body, dict):
        raise ProviderError(f"inference error ({PROVIDER_NAME}): the answer is not a JSON object")
    blocks = body.get("content")
    if not isinstance(blocks, list):
        raise ProviderError(f"inference error ({PROVIDER_NAME}): the answer has no content list")
    blocks = [block for block in blocks if isinstance(block, dict)]
    texts = [block["text"] for block in blocks if block.get("type") == "text" and isinstance(block.get("text"), str)]
    uses = [block for block in blocks if block.get("type") == "tool_use"]
    calls = []
    for call_id, block in zip(unique_call_ids([block.get("id") for block in uses]), uses, strict=True):
        name = block.get("name") if isinstance(block.get("name"), str) else ""
        arguments, raw, error = parse_arguments(block.get("input"))
        if not name:
            error = "the tool call has no name" + (f"; {error}" if error else "")
        calls.append(ToolCall(id=call_id, name=name, arguments=arguments, raw_arguments=raw, argument_error=error))
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    input_tokens = int_or_none(usage.get("input_tokens"))
    if input_tokens is not None:
        input_tokens += sum(int_or_none(usage.get(key)) or 0
                            for key in ("cache_creation_input_tokens", "cache_read_input_tokens"))
    stop = body.get("stop_reason")
    return ChatResult(
        content="\n".join(texts),
        tool_calls=tuple(calls),
        usage=Usage(input_tokens, int_or_none(usage.get("output_tokens"))),
        finish_reason=STOP_REASONS.get(stop, stop) if isinstance(stop, str) and stop else "stop",
        model=body.get("model") if isinstance(body.get("model"), str) and body.get("model") else model,
        provider=PROVIDER_NAME,
    )


class AnthropicProvider:
    """Messages API client. The key goes only into ``x-api-key``: never into a repr or an error message,
    and it is registered with the log scrubber."""

    provider_name = PROVIDER_NAME

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_version: str = DEFAULT_API_VERSION,
        send: Send = request_to_finish,
    ) -> None:
        if not api_key:
            raise ValueError("AnthropicProvider needs an API key")
        self.base_url = base_url
        self.url = messages_url(base_url)
        self.api_version = api_version
        self._api_key = api_key
        self._send = send
        register_secret(api_key)

    def __repr__(self) -> str:
        return f"AnthropicProvider(url={self.url!r}, api_version={self.api_version!r}, api_key=set)"

    def headers(self) -> dict[str, str]:
        return {"Content-Type": "application/json", "Accept": "application/json", "x-api-key": self._api_key,
                "anthropic-version": self.api_version}

    def chat(self, request: ChatRequest) -> ChatResult:
        """One messages call; ``ProviderError`` for error statuses and unusable answers, ``ProviderUnreachable``
        when no answer came, ``InferenceError`` for an empty message list."""
        body = post_json(self._send, PROVIDER_NAME, self.url, build_body(request), self.headers(), request.timeout_s,
                         (self._api_key,))
        try:
            return parse_message(body, request.model)
        except ProviderError as exc:
            raise ProviderError(redact(str(exc), (self._api_key,)), exc.status) from None

"""Scriptable model servers on 127.0.0.1: OpenAI chat completions and Anthropic messages.

Each server checks every request the way the real API does (the rules below, with the real APIs' error
shapes and, where known, their messages), records it, and answers with the next scripted answer. A request
that breaks a rule gets the API's error status and is also listed in ``rejections``, so a test can assert
that a client's requests were all accepted. With no scripted answer left the server answers 500 ``no
scripted answer``.

Scripted answers: a dict (sent as a 200 JSON body), a ``Reply`` (any status, headers, body: bytes for HTML
pages, non-JSON text), or a callable ``f(body) -> dict | Reply`` that sees the parsed request body.

``OpenAIServer(mode=...)`` rules (all modes):
  * ``POST {prefix}/v1/chat/completions`` only (any other path: 404);
  * ``Authorization`` must be ``Bearer <key>`` (``auth_style="bearer"``) or the bare key (``"raw"``) when a
    key is configured: else 401 ``invalid_api_key`` whose message echoes the key it got (servers do);
  * a JSON object body with ``model`` and a non-empty ``messages`` list; ``stream`` false or absent;
  * messages: roles system/developer/user/assistant/tool; user/system content a string or parts;
    assistant content a string, or null only next to ``tool_calls``; each tool call
    ``{id, type:"function", function:{name, arguments: string}}``; a ``tool`` message must answer an
    unanswered call of the assistant message before it, and every call must be answered before the next
    non-tool message;
  * ``tools`` entries ``{type:"function", function:{name, parameters}}``; ``tool_choice`` only with tools;
  * ``temperature`` in [0, 2].
``mode="openai"`` adds: unknown top-level parameters are refused; ``max_tokens`` is refused for models
  matching ``^(o[1-9]|gpt-5|gpt-4\\.1)`` ("Use 'max_completion_tokens' instead").
``mode="llamacpp"`` adds llama.cpp's quirks: an assistant message with ``tool_calls`` and ``content: null``
  gets HTTP 500, and so do history tool-call arguments that are not a JSON object text ("Failed to parse
  tool call arguments as JSON"); ``max_completion_tokens`` is refused (this stand-in wants ``max_tokens``).
``mode="ollama"``: like llamacpp without the 500s (Ollama knows only ``max_tokens``).

``AnthropicServer`` rules: ``POST {prefix}/v1/messages``; ``x-api-key`` must equal the key (else 401
``authentication_error``); ``anthropic-version`` present; only known top-level fields; ``model``,
``max_tokens`` >= 1, non-empty ``messages``; roles user/assistant only, the first user, roles alternating;
content a non-empty string or a non-empty block list; text blocks non-blank; ``tool_use`` only in assistant
messages, ids matching ``^[a-zA-Z0-9_-]+$``, ``input`` an object; ``tool_result`` only in user messages,
before any other block, each answering a ``tool_use`` of the previous message, and every ``tool_use``
answered in the next message; a final assistant message may not end with whitespace; ``system`` a string
or text blocks; ``temperature`` in [0, 1]; ``tools`` ``{name, description?, input_schema:{type:"object"}}``;
``tool_choice`` only with tools.

``OpenAIServer(props=...)`` also answers llama.cpp's ``GET /props``, ``show={model: answer}`` Ollama's
``POST /api/show``, and ``models=[entry, ...]`` ``GET /v1/models`` (``{"object": "list", "data": entries}``, with
the same key check as chat); without them those paths are 404.

A ``Hang()`` scripted answer never comes: it sets ``hang.arrived`` when the request is in and holds the
connection open until ``hang.release()`` (call it in a ``finally``), then answers 503.

Answer builders: ``openai_answer(...)`` and ``anthropic_answer(...)``.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

import orjson

from standins.loopback_http import LoopbackServer, Reply, Request

REASONING_MODELS = re.compile(r"^(o[1-9]|gpt-5|gpt-4\.1)")
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
OPENAI_PARAMS = frozenset({
    "model", "messages", "stream", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stop",
    "tools", "tool_choice", "parallel_tool_calls", "user", "seed", "response_format", "presence_penalty",
    "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "metadata", "store", "reasoning_effort",
    "stream_options", "service_tier", "modalities", "prediction", "audio", "verbosity",
})
ANTHROPIC_PARAMS = frozenset({
    "model", "max_tokens", "messages", "system", "temperature", "top_p", "top_k", "stop_sequences", "stream",
    "tools", "tool_choice", "metadata", "thinking", "service_tier",
})

Answer = Any  # dict | Reply | Callable[[dict], dict | Reply]


class Hang:
    """A scripted answer for a server that hangs: takes the request, then says nothing until released."""

    def __init__(self, hold_s: float = 60.0) -> None:
        self.arrived = threading.Event()
        self.released = threading.Event()
        self.hold_s = hold_s  # an upper bound so a forgotten release cannot keep a server thread forever

    def release(self) -> None:
        self.released.set()

    def __call__(self, body: Any) -> "Reply":
        self.arrived.set()
        self.released.wait(self.hold_s)
        return Reply(503, {"error": {"message": "released", "type": "server_error"}})


class Rejected(Exception):
    """A request broke a rule: answer ``reply``."""

    def __init__(self, reply: Reply, reason: str) -> None:
        super().__init__(reason)
        self.reply = reply
        self.reason = reason


@dataclass
class Recorded:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or None when the body was not JSON

    def header(self, name: str) -> str | None:
        for key, value in self.headers.items():
            if key.lower() == name.lower():
                return value
        return None


class _ScriptedServer:
    path = ""

    def __init__(self, *, prefix: str = "") -> None:
        self._answers: deque[Answer] = deque()
        self._lock = threading.Lock()
        self.requests: list[Recorded] = []
        self.rejections: list[str] = []
        self.prefix = prefix.rstrip("/")
        self._server = LoopbackServer({("POST", re.escape(self.prefix + self.path)): self._handle, **self.extra_routes()})

    # ---- lifecycle
    def __enter__(self):
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)

    @property
    def url(self) -> str:
        """The server root (``http://127.0.0.1:<port>``), without ``prefix``."""
        return self._server.url

    @property
    def all_requests(self) -> list[Request]:
        """Every HTTP request that arrived, on any path (``requests`` has only the endpoint's)."""
        return self._server.requests

    def script(self, *answers: Answer):
        with self._lock:
            self._answers.extend(answers)
        return self

    @property
    def pending(self) -> int:
        return len(self._answers)

    @property
    def last(self) -> Recorded:
        return self.requests[-1]

    # ---- handling
    def _handle(self, request: Request) -> Reply:
        try:
            body = orjson.loads(request.body)
        except orjson.JSONDecodeError:
            body = None
        recorded = Recorded(request.path, request.headers, body)
        with self._lock:
            self.requests.append(recorded)
        try:
            self.check(recorded)
        except Rejected as exc:
            with self._lock:
                self.rejections.append(exc.reason)
            return exc.reply
        with self._lock:
            answer = self._answers.popleft() if self._answers else None
        if answer is None:
            return Reply(500, {"error": {"message": "no scripted answer", "type": "server_error"}})
        if callable(answer):
            answer = answer(body)
        return answer if isinstance(answer, Reply) else Reply(200, answer)

    def check(self, recorded: Recorded) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def extra_routes(self) -> dict:
        """More (method, path pattern) -> handler routes beside the endpoint (none by default)."""
        return {}


# --------------------------------------------------------------------------------------------- OpenAI


def _openai_error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
                  param: str | None = None) -> Rejected:
    return Rejected(Reply(status, {"error": {"message": message, "type": kind, "param": param, "code": code}}), message)


class OpenAIServer(_ScriptedServer):
    path = "/v1/chat/completions"

    def __init__(self, *, mode: str = "openai", api_key: str | None = None, auth_style: str = "bearer",
                 prefix: str = "", props: dict | None = None, show: dict[str, dict] | None = None,
                 models: list[dict] | None = None) -> None:
        if mode not in ("openai", "llamacpp", "ollama"):
            raise ValueError(mode)
        self.mode = mode
        self.api_key = api_key
        self.auth_style = auth_style
        self.props = props
        self.show = show
        self.models = models
        super().__init__(prefix=prefix)

    def extra_routes(self) -> dict:
        """``props``: llama.cpp's ``GET /props`` answers it (public, no key). ``show``: Ollama's ``POST /api/show``
        answers ``show[model]`` for ``{"model": name}`` (or the older ``{"name": name}``), 404 for a model it
        lacks, 400 without a name. Without them those paths are 404, as on servers that lack them."""
        routes = {}
        if self.props is not None:
            routes[("GET", re.escape(self.prefix + "/props"))] = lambda request: Reply(200, self.props)
        if self.show is not None:
            routes[("POST", re.escape(self.prefix + "/api/show"))] = self._show
        if self.models is not None:
            routes[("GET", re.escape(self.prefix + "/v1/models"))] = self._models
        return routes

    def _models(self, request: Request) -> Reply:
        try:
            self._check_key(Recorded(request.path, request.headers, None))
        except Rejected as exc:
            return exc.reply
        return Reply(200, {"object": "list", "data": self.models})

    def _show(self, request: Request) -> Reply:
        try:
            body = orjson.loads(request.body)
        except orjson.JSONDecodeError:
            return Reply(400, {"error": "invalid JSON"})
        name = (body.get("model") or body.get("name")) if isinstance(body, dict) else None
        if not isinstance(name, str) or not name:
            return Reply(400, {"error": "model is required"})
        answer = (self.show or {}).get(name)
        return Reply(200, answer) if answer is not None else Reply(404, {"error": f"model '{name}' not found"})

    def _check_key(self, recorded: Recorded) -> None:
        if self.api_key is not None:
            got = recorded.header("Authorization") or ""
            expected = f"Bearer {self.api_key}" if self.auth_style == "bearer" else self.api_key
            if got != expected:
                shown = got.removeprefix("Bearer ")
                raise _openai_error(401, f"Incorrect API key provided: {shown}. You can find your API key at "
                                         "https://platform.openai.com/account/api-keys.", code="invalid_api_key")

    def check(self, recorded: Recorded) -> None:
        self._check_key(recorded)
        body = recorded.body
        if not isinstance(body, dict):
            raise _openai_error(400, "We could not parse the JSON body of your request.")
        if "application/json" not in (recorded.header("Content-Type") or ""):
            raise _openai_error(400, "Content-Type must be application/json")
        if self.mode == "openai":
            for key in body:
                if key not in OPENAI_PARAMS:
                    raise _openai_error(400, f"Unrecognized request argument supplied: {key}")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _openai_error(400, "you must provide a model parameter", param="model")
        if body.get("stream") not in (None, False):
            raise _openai_error(400, "this stand-in does not stream", param="stream")
        for field in ("max_tokens", "max_completion_tokens"):
            if field in body and (not isinstance(body[field], int) or isinstance(body[field], bool) or body[field] < 1):
                raise _openai_error(400, f"Invalid '{field}': expected an integer >= 1.", param=field)
        if self.mode == "openai" and "max_tokens" in body and REASONING_MODELS.match(model):
            raise _openai_error(400, "Unsupported parameter: 'max_tokens' is not supported with this model. "
                                     "Use 'max_completion_tokens' instead.", "invalid_request_error",
                                "unsupported_parameter", "max_tokens")
        if self.mode != "openai" and "max_completion_tokens" in body:
            raise _openai_error(400, "max_completion_tokens is not supported here; send max_tokens",
                                param="max_completion_tokens")
        if "temperature" in body:
            temperature = body["temperature"]
            if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not 0 <= temperature <= 2:
                raise _openai_error(400, "Invalid 'temperature': expected a number in [0, 2].", param="temperature")
        self._check_tools(body)
        self._check_messages(body.get("messages"))

    def _check_tools(self, body: dict) -> None:
        tools = body.get("tools")
        if tools is not None:
            if not isinstance(tools, list) or not tools:
                raise _openai_error(400, "Invalid 'tools': empty array. Expected an array with minimum length 1.",
                                    param="tools")
            for index, tool in enumerate(tools):
                function = tool.get("function") if isinstance(tool, dict) else None
                if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
                    raise _openai_error(400, f"Invalid 'tools[{index}]': expected {{type: 'function', function}}.")
                if not isinstance(function.get("name"), str) or not TOOL_NAME.match(function["name"]):
                    raise _openai_error(400, f"Invalid 'tools[{index}].function.name'.")
                if "parameters" in function and not isinstance(function["parameters"], dict):
                    raise _openai_error(400, f"Invalid 'tools[{index}].function.parameters': expected an object.")
        if "tool_choice" in body and tools is None:
            raise _openai_error(400, "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
                                     "are specified.", param="tool_choice")

    def _check_messages(self, messages: Any) -> None:
        if not isinstance(messages, list) or not messages:
            raise _openai_error(400, "Invalid 'messages': empty array. Expected an array with minimum length 1.",
                                param="messages")
        open_calls: list[str] = []
        after_calls = False
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                raise _openai_error(400, f"Invalid type for 'messages[{index}]': expected an object.")
            role = message.get("role")
            if role not in ("system", "developer", "user", "assistant", "tool"):
                raise _openai_error(400, f"Invalid value for 'messages[{index}].role': {role!r}.")
            if role != "tool" and after_calls:
                if open_calls:
                    raise _openai_error(400, "An assistant message with 'tool_calls' must be followed by tool messages"
                                             " responding to each 'tool_call_id'. The following tool_call_ids did not"
                                             f" have response messages: {', '.join(open_calls)}")
                after_calls = False
            content = message.get("content")
            if role in ("system", "developer", "user"):
                if not isinstance(content, (str, list)):
                    raise _openai_error(400, f"Invalid type for 'messages[{index}].content': expected a string.")
            elif role == "assistant":
                calls = message.get("tool_calls")
                if calls is not None:
                    if self.mode == "llamacpp" and content is None:
                        raise Rejected(Reply(500, {"error": {"code": 500, "message": "Expected 'content' to be a "
                                                             "string or an array", "type": "server_error"}}),
                                       "llama.cpp: null content next to tool_calls")
                    open_calls = self._check_calls(index, calls)
                    after_calls = True
                if not isinstance(content, (str, list)) and not (content is None and calls):
                    raise _openai_error(400, f"Invalid value for 'messages[{index}].content': expected a string; "
                                             "content is required unless tool_calls are given.")
            else:  # tool
                call_id = message.get("tool_call_id")
                if not after_calls:
                    raise _openai_error(400, "Invalid parameter: messages with role 'tool' must be a response to a "
                                             "preceeding message with 'tool_calls'.", param=f"messages.[{index}].role")
                if call_id not in open_calls:
                    raise _openai_error(400, f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in "
                                             "'tool_calls' of previous message.", param=f"messages.[{index}].tool_call_id")
                open_calls.remove(call_id)
                if not isinstance(content, (str, list)):
                    raise _openai_error(400, f"Invalid type for 'messages[{index}].content': expected a string.")
        if open_calls:
            raise _openai_error(400, "An assistant message with 'tool_calls' must be followed by tool messages "
                                     "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                                     f"response messages: {', '.join(open_calls)}")

    def _check_calls(self, index: int, calls: Any) -> list[str]:
        if not isinstance(calls, list) or not calls:
            raise _openai_error(400, f"Invalid 'messages[{index}].tool_calls': empty array.")
        ids = []
        for position, call in enumerate(calls):
            where = f"messages[{index}].tool_calls[{position}]"
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(call, dict) or call.get("type") != "function" or not isinstance(function, dict):
                raise _openai_error(400, f"Invalid '{where}': expected {{id, type: 'function', function}}.")
            if not isinstance(call.get("id"), str) or not call["id"]:
                raise _openai_error(400, f"Missing required parameter: '{where}.id'.")
            if not isinstance(function.get("name"), str):
                raise _openai_error(400, f"Missing required parameter: '{where}.function.name'.")
            arguments = function.get("arguments")
            if not isinstance(arguments, str):
                raise _openai_error(400, f"Invalid type for '{where}.function.arguments': expected a string.")
            if self.mode == "llamacpp":
                try:
                    parsed = orjson.loads(arguments)
                except orjson.JSONDecodeError:
                    parsed = None
                if not isinstance(parsed, dict):
                    raise Rejected(Reply(500, {"error": {"code": 500, "message": "Failed to parse tool call arguments"
                                                         " as JSON", "type": "server_error"}}),
                                   "llama.cpp: tool call arguments are not JSON")
            ids.append(call["id"])
        return ids


def openai_answer(content: str | None = "", tool_calls: list | tuple = (), *, usage: tuple[int, int] | None = (10, 5),
                  finish_reason: str | None = None, model: str = "stand-in-model", **extra: Any) -> dict:
    """A chat-completions body. ``tool_calls`` entries: ``(id, name, arguments)`` (``arguments`` sent as given:
    a string, or an object like some servers do; ``id`` None leaves it out) or ready dicts.
    ``finish_reason`` None means: "tool_calls" when there are calls, else "stop"; pass ``extra`` to add or
    (with value ``...``) remove top-level fields."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        wire_calls = []
        for call in tool_calls:
            if isinstance(call, dict):
                wire_calls.append(call)
                continue
            call_id, name, arguments = call
            entry: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
            if call_id is not None:
                entry["id"] = call_id
            wire_calls.append(entry)
        message["tool_calls"] = wire_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-standin", "object": "chat.completion", "created": 1_795_342_530, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop")}],
    }
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    for key, value in extra.items():
        if value is ...:
            body.pop(key, None)
        else:
            body[key] = value
    return body


# --------------------------------------------------------------------------------------------- Anthropic


def _anthropic_error(status: int, message: str, kind: str = "invalid_request_error") -> Rejected:
    return Rejected(Reply(status, {"type": "error", "error": {"type": kind, "message": message}}), message)


class AnthropicServer(_ScriptedServer):
    path = "/v1/messages"

    def __init__(self, *, api_key: str = "sk-ant-standin-key-0001", prefix: str = "") -> None:
        self.api_key = api_key
        super().__init__(prefix=prefix)

    def check(self, recorded: Recorded) -> None:
        if recorded.header("x-api-key") != self.api_key:
            raise _anthropic_error(401, "invalid x-api-key", "authentication_error")
        if not recorded.header("anthropic-version"):
            raise _anthropic_error(400, "anthropic-version: header is required")
        body = recorded.body
        if not isinstance(body, dict):
            raise _anthropic_error(400, "The request body is not valid JSON.")
        for key in body:
            if key not in ANTHROPIC_PARAMS:
                raise _anthropic_error(400, f"{key}: Extra inputs are not permitted")
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise _anthropic_error(400, "model: Field required")
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise _anthropic_error(400, "max_tokens: Field required (an integer >= 1)")
        if "temperature" in body:
            temperature = body["temperature"]
            if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not 0 <= temperature <= 1:
                raise _anthropic_error(400, "temperature: Input should be less than or equal to 1")
        system = body.get("system")
        if system is not None and not isinstance(system, str):
            if not isinstance(system, list) or not all(isinstance(b, dict) and b.get("type") == "text" for b in system):
                raise _anthropic_error(400, "system: Input should be a valid string or a list of text blocks")
        self._check_tools(body)
        self._check_messages(body.get("messages"))

    def _check_tools(self, body: dict) -> None:
        tools = body.get("tools")
        if tools is not None:
            if not isinstance(tools, list):
                raise _anthropic_error(400, "tools: Input should be a valid list")
            for index, tool in enumerate(tools):
                if not isinstance(tool, dict):
                    raise _anthropic_error(400, f"tools.{index}: Input should be a valid dictionary")
                for key in tool:
                    if key not in ("name", "description", "input_schema", "type", "cache_control"):
                        raise _anthropic_error(400, f"tools.{index}.{key}: Extra inputs are not permitted")
                if not isinstance(tool.get("name"), str) or not TOOL_NAME.match(tool["name"]):
                    raise _anthropic_error(400, f"tools.{index}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
                schema = tool.get("input_schema")
                if not isinstance(schema, dict) or schema.get("type") != "object":
                    raise _anthropic_error(400, f"tools.{index}.input_schema.type: Input should be 'object'")
        choice = body.get("tool_choice")
        if choice is not None:
            if not tools:
                raise _anthropic_error(400, "tool_choice may only be specified while providing tools.")
            if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
                raise _anthropic_error(400, "tool_choice: Input tag does not match any of the expected tags")

    def _check_messages(self, messages: Any) -> None:
        if not isinstance(messages, list) or not messages:
            raise _anthropic_error(400, "messages: at least one message is required")
        previous_uses: list[str] = []
        for index, message in enumerate(messages):
            where = f"messages.{index}"
            if not isinstance(message, dict):
                raise _anthropic_error(400, f"{where}: Input should be a valid dictionary")
            role = message.get("role")
            if role not in ("user", "assistant"):
                raise _anthropic_error(400, f"{where}.role: Input should be 'user' or 'assistant'")
            if index == 0 and role != "user":
                raise _anthropic_error(400, "messages: first message must use the \"user\" role")
            if index > 0 and role == messages[index - 1].get("role"):
                raise _anthropic_error(400, "messages: roles must alternate between \"user\" and \"assistant\", but "
                                            f"found multiple \"{role}\" roles in a row")
            content = message.get("content")
            last = index == len(messages) - 1
            if isinstance(content, str):
                blocks = [{"type": "text", "text": content}] if content or not (last and role == "assistant") else []
            elif isinstance(content, list):
                blocks = content
            else:
                raise _anthropic_error(400, f"{where}.content: Input should be a valid string or list")
            if not blocks and not (last and role == "assistant"):
                raise _anthropic_error(400, f"{where}: all messages must have non-empty content except for the "
                                            "optional final assistant message")
            uses: list[str] = []
            answered: list[str] = []
            seen_other = False
            for position, block in enumerate(blocks):
                at = f"{where}.content.{position}"
                kind = block.get("type") if isinstance(block, dict) else None
                if kind == "text":
                    if not isinstance(block.get("text"), str) or not block["text"].strip():
                        raise _anthropic_error(400, f"{at}: text content blocks must contain non-whitespace text")
                    seen_other = True
                elif kind == "tool_use":
                    if role != "assistant":
                        raise _anthropic_error(400, f"{at}: tool_use blocks are only allowed in assistant messages")
                    if not isinstance(block.get("id"), str) or not ANTHROPIC_ID.match(block["id"]):
                        raise _anthropic_error(400, f"{at}.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
                    if block["id"] in uses:
                        raise _anthropic_error(400, f"{at}: tool_use ids must be unique")
                    if not isinstance(block.get("name"), str) or not isinstance(block.get("input"), dict):
                        raise _anthropic_error(400, f"{at}: tool_use needs a name and an input object")
                    uses.append(block["id"])
                    seen_other = True
                elif kind == "tool_result":
                    if role != "user":
                        raise _anthropic_error(400, f"{at}: tool_result blocks are only allowed in user messages")
                    if seen_other:
                        raise _anthropic_error(400, f"{where}: tool_result blocks must come first in the content, "
                                                    "before any other block")
                    tool_use_id = block.get("tool_use_id")
                    if tool_use_id not in previous_uses or tool_use_id in answered:
                        raise _anthropic_error(400, f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: "
                                                    f"{tool_use_id}. Each `tool_result` block must have a corresponding "
                                                    "`tool_use` block in the previous message.")
                    result = block.get("content", "")
                    if not isinstance(result, (str, list)):
                        raise _anthropic_error(400, f"{at}.content: Input should be a valid string or list")
                    answered.append(tool_use_id)
                else:
                    raise _anthropic_error(400, f"{at}.type: Input tag {kind!r} does not match any of the expected tags")
            missing = [use for use in previous_uses if use not in answered]
            if missing:
                raise _anthropic_error(400, f"{where}: `tool_use` ids were found without `tool_result` blocks "
                                            f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                                            "corresponding `tool_result` block in the next message.")
            if last and role == "assistant" and blocks and blocks[-1].get("type") == "text" \
                    and blocks[-1]["text"] != blocks[-1]["text"].rstrip():
                raise _anthropic_error(400, "messages: final assistant content cannot end with trailing whitespace")
            previous_uses = uses
        if previous_uses:
            raise _anthropic_error(400, f"`tool_use` ids were found without `tool_result` blocks immediately after: "
                                        f"{', '.join(previous_uses)}.")


def anthropic_answer(text: str | None = "", tool_uses: list | tuple = (), *, usage: tuple[int, int] | None = (10, 5),
                     stop_reason: str | None = None, model: str = "claude-standin", **extra: Any) -> dict:
    """A messages body. ``text`` None or "" adds no text block; ``tool_uses``: ``(id, name, input)`` or
    ready block dicts. ``stop_reason`` None means "tool_use" with tool uses, else "end_turn"; ``extra``
    adds or (value ``...``) removes top-level fields."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for use in tool_uses:
        if isinstance(use, dict):
            content.append(use)
        else:
            use_id, name, tool_input = use
            content.append({"type": "tool_use", "id": use_id, "name": name, "input": tool_input})
    body: dict[str, Any] = {
        "id": "msg_standin", "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": stop_reason or ("tool_use" if tool_uses else "end_turn"), "stop_sequence": None,
    }
    if usage is not None:
        body["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1]}
    for key, value in extra.items():
        if value is ...:
            body.pop(key, None)
        else:
            body[key] = value
    return body



"""What both wire formats share: calling ``send``, error messages without secrets, tool-call ids and arguments, and
repairing tool-call/tool-result pairing before a request goes out.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Mapping

from automaton_min.errors import RuntimeFailure
from automaton_min.inference.refusals import config_fix, context_overflow
from automaton_min.inference.types import (ContextTooLong, InferenceError, Message, ModelUnusable, ProviderError,
                                          ToolCall)
from automaton_min.net.http import HttpError, NetworkError, Response

Send = Callable[..., Response]

SNIPPET_LIMIT = 200
# The largest answer body taken. The router caps a turn's output at 8,192 tokens at most (a few hundred KB of
# JSON even in the worst escaping); a bigger body is a broken or hostile server. Parsing it, counting its tokens
# for every later prompt and storing it in the turn cost seconds a turn on a small device (10 MB: about 8 s per
# turn on a desktop, for as long as the turn stayed in the recent history), so it is refused, as a failed turn.
MAX_ANSWER_BYTES = 8 * 1024 * 1024
MISSING_RESULT = "error: no result was recorded for this tool call"
REDACTED = "[redacted]"


class ProviderUnreachable(InferenceError):
    """No answer from the provider (refused, timed out, DNS, TLS, circuit breaker open)."""


def one_line(text: str, limit: int = SNIPPET_LIMIT) -> str:
    """``text`` on one line, whitespace collapsed, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every non-empty secret replaced by ``[redacted]``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def error_detail(body: bytes, secrets: Iterable[str | None] = ()) -> str:
    """One line describing an error body: a JSON ``error.message`` (OpenAI's and Anthropic's), a JSON
    ``message``/``error`` string, else the body's start. Secrets go before the cut, so no part of one survives it."""
    text = redact(body.decode("utf-8", "replace"), secrets)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the stack
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"].strip():
            kind = error.get("type")
            prefix = f"{kind}: " if isinstance(kind, str) and kind and kind not in error["message"] else ""
            return one_line(prefix + error["message"])
        for key in ("message", "error", "detail"):
            if isinstance(data.get(key), str) and data[key].strip():
                return one_line(data[key])
    return one_line(text) if text.strip() else "(empty body)"


def post_json(
    send: Send,
    provider: str,
    url: str,
    payload: dict[str, Any],
    headers: Mapping[str, str],
    timeout: float,
    secrets: Iterable[str | None],
) -> Any:
    """POST ``payload``; the parsed JSON answer, or ``ProviderError`` (a body over ``MAX_ANSWER_BYTES`` too, unparsed),
    ``ProviderUnreachable``, ``ContextTooLong``, or for 401/403/404 ``ModelUnusable`` naming the setting to change.
    Every error is one line naming the provider, secrets removed (servers echo keys in 401s)."""
    secrets = tuple(secrets)
    try:
        response = send("POST", url, json=payload, headers=dict(headers), timeout=timeout)
    except NetworkError as exc:
        raise ProviderUnreachable(redact(f"inference error ({provider}): {exc}", secrets)) from exc
    except InferenceError:
        raise
    except RuntimeFailure as exc:  # a resilient client's CircuitOpenError: nothing was sent
        raise ProviderUnreachable(redact(f"inference error ({provider}): {exc}", secrets)) from exc
    if len(response.body) > MAX_ANSWER_BYTES:
        raise ProviderError(f"inference error ({provider}): {response.status} with a body of "
                            f"{len(response.body):,} bytes, over the {MAX_ANSWER_BYTES >> 20} MiB no answer reaches "
                            "within the output-token caps; the server is misbehaving", response.status)
    if not response.ok:
        message = f"inference error ({provider}): {response.status}: {error_detail(response.body, secrets)}"
        overflow = context_overflow(response.status, response.body)
        if overflow is not None:
            raise ContextTooLong(message, response.status, prompt_tokens=overflow[0], context_tokens=overflow[1])
        fix = config_fix(provider, response.status)
        if fix is not None:
            raise ModelUnusable(f"{message}; {fix}", response.status)
        raise ProviderError(message, response.status)
    try:
        return response.json()
    except HttpError:
        detail = one_line(redact(response.body.decode("utf-8", "replace"), secrets)) or "(empty body)"
        raise ProviderError(f"inference error ({provider}): {response.status} with a body that is not JSON: {detail}",
                            response.status) from None


HUGE_NUMBER = "tool arguments hold a whole number beyond 64 bits, or nest deeper than 64 levels"


def parse_arguments(value: Any) -> tuple[dict[str, Any], str, str | None]:
    """Tool-call arguments as ``(arguments, raw_arguments, argument_error)``; never raises.

    Accepted: a JSON object's text (raw line breaks and tabs in its strings too, as small models write), an object
    (some servers), empty text or null (no arguments), a JSON string holding an object (double-encoded). Anything else
    gives ``{}`` and an error for the model."""
    if isinstance(value, dict):
        raw = json.dumps(value, ensure_ascii=False)
        return ({}, raw, HUGE_NUMBER) if _has_huge_integer(value) else (value, raw, None)
    if value is None:
        return {}, "", None
    if not isinstance(value, str):
        raw = json.dumps(value, ensure_ascii=False)
        return {}, raw, f"tool arguments must be a JSON object, got {_json_kind(value)}"
    if not value.strip():
        return {}, value, None
    try:
        parsed = json.loads(value, strict=False)
    except json.JSONDecodeError as exc:
        return {}, value, f"tool arguments are not valid JSON ({exc.msg} at position {exc.pos})"
    except (ValueError, RecursionError) as exc:  # a number past the digit limit, nesting past the stack
        return {}, value, f"tool arguments are not usable JSON ({type(exc).__name__})"
    if isinstance(parsed, str):
        try:
            inner = json.loads(parsed)
        except (ValueError, RecursionError):
            inner = None
        if isinstance(inner, dict):
            parsed = inner
    if not isinstance(parsed, dict):
        return {}, value, f"tool arguments must be a JSON object, got {_json_kind(parsed)}"
    if _has_huge_integer(parsed):
        return {}, value, HUGE_NUMBER
    return parsed, value, None


def _has_huge_integer(value: Any, depth: int = 0) -> bool:
    """Whether a whole number outside 64 bits (what orjson and the database store) sits anywhere in ``value``, or
    it nests too deep to look."""
    if isinstance(value, int) and not isinstance(value, bool):
        return not -(2**63) <= value < 2**64
    if depth > 64:
        return True
    if isinstance(value, dict):
        return any(_has_huge_integer(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_has_huge_integer(v, depth + 1) for v in value)
    return False


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def arguments_text(call: ToolCall) -> str:
    """The arguments to send back in the history: the model's text when a valid object, else the parsed object as
    JSON, never invalid JSON (llama.cpp chat templates parse it and fail the request)."""
    if call.argument_error is None and call.raw_arguments.strip():
        try:
            if isinstance(json.loads(call.raw_arguments), dict):
                return call.raw_arguments
        except ValueError:
            pass
    return json.dumps(call.arguments, ensure_ascii=False)


def unique_call_ids(provider_ids: list[Any]) -> list[str]:
    """One id per call, unique within this answer only (local models repeat ids or send none): a new non-empty provider
    id is kept, any other becomes ``<provider id or "call">_<position>`` (``_2``, ``_3``... while taken)."""
    ids: list[str | None] = []
    taken: set[str] = set()
    for value in provider_ids:
        text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
        if text and text not in taken:
            ids.append(text)
            taken.add(text)
        else:
            ids.append(None)
    result: list[str] = []
    for position, (value, kept) in enumerate(zip(provider_ids, ids, strict=True)):
        if kept is not None:
            result.append(kept)
            continue
        base = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value) else "call"
        candidate = f"{base}_{position}"
        suffix = 2
        while candidate in taken:
            candidate = f"{base}_{position}_{suffix}"
            suffix += 1
        taken.add(candidate)
        result.append(candidate)
    return result


def int_or_none(value: Any) -> int | None:
    """A token count: non-negative integers only (``True`` is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def repair_tool_pairing(messages: Iterable[Message]) -> tuple[Message, ...]:
    """Pair every tool result with a call of the assistant message before it, and every call with a result (both APIs
    answer 400 otherwise): an orphan result becomes user text ``[tool result <id>] ...``, an unanswered call gets
    ``MISSING_RESULT``. A well-formed conversation passes unchanged."""
    out: list[Message] = []
    open_calls: list[str] = []  # calls of the last assistant message not yet answered, in order
    orphans: list[Message] = []  # results inside the current run that answer no open call
    in_run = False  # right after an assistant message with calls, or among its results

    def end_run() -> None:
        out.extend(Message(role="tool", content=MISSING_RESULT, tool_call_id=call_id) for call_id in open_calls)
        out.extend(_as_user_text(message) for message in orphans)
        open_calls.clear()
        orphans.clear()

    for message in messages:
        if message.role == "tool":
            if not in_run:
                out.append(_as_user_text(message))
            elif message.tool_call_id in open_calls:
                open_calls.remove(message.tool_call_id)
                out.append(message)
            else:
                orphans.append(message)
            continue
        if in_run:
            end_run()
            in_run = False
        out.append(message)
        if message.role == "assistant" and message.tool_calls:
            open_calls = [call.id for call in message.tool_calls]
            in_run = True
    if in_run:
        end_run()
    return tuple(out)


def _as_user_text(message: Message) -> Message:
    return Message(role="user", content=f"[tool result {message.tool_call_id or 'unknown'}] {message.content}")


def require_messages(messages: tuple[Message, ...], provider: str) -> None:
    if not messages:
        raise InferenceError(f"inference error ({provider}): no messages to send")


__all__ = [
    "MISSING_RESULT", "ProviderUnreachable", "Send", "arguments_text", "error_detail", "int_or_none", "one_line",
    "parse_arguments", "post_json", "redact", "repair_tool_pairing", "require_messages", "unique_call_ids",
]

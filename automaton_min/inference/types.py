"""The provider-neutral shapes of a chat (messages, tool calls, tool schemas, results): providers translate them to and
from their wire formats; the router and the agent loop see only these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from automaton_min.errors import RuntimeFailure, UserError

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """A tool the model asked for. ``arguments`` is the parsed JSON object; when the model sent
    arguments that are not a JSON object, ``arguments`` is ``{}`` and ``argument_error`` says why
    (the loop turns that into an error result for the model, never a crash)."""

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str = ""
    argument_error: str | None = None


@dataclass(frozen=True)
class Message:
    """One chat message. ``tool_calls`` only on assistant messages; ``tool_call_id`` only on tool results."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class ToolSchema:
    """A tool offered to the model: name, description, JSON-schema parameters (an object schema)."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class Usage:
    """Token counts as the provider reported them (``None`` when it did not)."""

    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    max_tokens: int
    tools: tuple[ToolSchema, ...] = ()
    temperature: float | None = None
    timeout_s: float = 120.0
    tool_choice: str | None = None  # the one tool the answer must call (servers with a grammar enforce it)
    seed: int | None = None


@dataclass(frozen=True)
class ChatResult:
    """What came back: text, tool calls (ids unique within the result), usage, why it stopped."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    model: str = ""
    provider: str = ""


class InferenceError(RuntimeFailure):
    """Base for provider failures the router and loop handle (counted toward the loop's error limit)."""


class ProviderError(InferenceError):
    """The provider answered with an error status or an unusable body (HTML error page, no choices)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ModelUnusable(UserError, ProviderError):
    """No call can succeed until the configuration changes (no provider for the model, a refused key, a model
    the server does not have). It is a ``UserError``: ``run`` stops with exit code 2 and the fix, instead of
    retrying a call that cannot work."""


class ContextTooLong(ProviderError):
    """The server refused the prompt as longer than the model's context. ``prompt_tokens`` (what it counted)
    and ``context_tokens`` (its window) are set when the server said them."""

    def __init__(self, message: str, status: int | None = 400, *, prompt_tokens: int | None = None,
                 context_tokens: int | None = None) -> None:
        super().__init__(message, status)
        self.prompt_tokens = prompt_tokens
        self.context_tokens = context_tokens

"""What a provider's error answer means: the prompt was too long for the model (400, or 413 from some proxies), the
configuration cannot work (401, 403: the key; 404: the model or base URL) and what to change, or neither.
"""

from __future__ import annotations

import json
import re
from typing import Any

OVERFLOW_STATUSES = frozenset({400, 413})
CONFIG_STATUSES = frozenset({401, 403, 404})
MIN_PLAUSIBLE_WINDOW = 512
MAX_PLAUSIBLE_TOKENS = 100_000_000

_OVERFLOW_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_OVERFLOW_PHRASES = ("context length", "context size", "context window", "maximum context", "n_ctx",
                     "prompt is too long", "too many tokens")
# (regex, which group is the prompt count, which is the window); a group index of 0 means "not said".
# In order: llama.cpp, Anthropic, llama-cpp-python's own wording, then the first sentence OpenAI, vLLM and
# llama-cpp-python's server share with each one's second (the messages' count is the prompt's).
_NUMBERS = (
    (re.compile(r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)"), 1, 2),
    (re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum"), 1, 2),
    (re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)"), 1, 2),
    (re.compile(r"maximum context length is (\d+) tokens.*?\((\d+) in the messages", re.S), 2, 1),
    (re.compile(r"maximum context length is (\d+) tokens.*?prompt contains at least (\d+) input tokens", re.S), 2, 1),
    (re.compile(r"maximum context length is (\d+) tokens.*?(?:resulted in|requested|request has) (\d+) "
                r"(?:input )?tokens", re.S), 2, 1),
    (re.compile(r"maximum context length is (\d+) tokens"), 0, 1),
)

# Which settings fix a refused call, by provider name (``wire_common.post_json``'s ``provider``).
_KEY_FIX = {
    "openai": "set openaiApiKey to a valid OpenAI key",
    "openai-compatible": "set openaiApiKey to the key your server expects (or openaiBaseUrl to the right server)",
    "anthropic": "set anthropicApiKey to a valid Anthropic key",
    "conway": "run automaton-min provision for a new Conway key (or set conwayApiKey)",
    "ollama": "check ollamaBaseUrl",
}
_MODEL_FIX = {
    "openai": "set inferenceModel to a model your OpenAI account offers",
    "openai-compatible": "set inferenceModel to a model your server has, or correct openaiBaseUrl",
    "anthropic": "set inferenceModel to an Anthropic model name",
    "conway": "set inferenceModel to a model Conway offers (or correct conwayApiUrl)",
    "ollama": "pull the model (ollama pull <name>) or set inferenceModel to one Ollama has",
}


def _error_object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body.decode("utf-8", "replace"))
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the stack
        return {}
    if not isinstance(data, dict):
        return {}
    error = data.get("error")
    return error if isinstance(error, dict) else data


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def context_overflow(status: int, body: bytes) -> tuple[int | None, int | None] | None:
    """``(prompt_tokens, context_tokens)`` (each None when not said) if the answer is a context overflow, else None."""
    if status not in OVERFLOW_STATUSES:
        return None
    error = _error_object(body)
    message = error.get("message") if isinstance(error.get("message"), str) else body.decode("utf-8", "replace")
    codes = {str(error.get(key)) for key in ("code", "type") if error.get(key) is not None}
    lowered = message.lower()
    if not (codes & _OVERFLOW_CODES or any(phrase in lowered for phrase in _OVERFLOW_PHRASES)):
        return None
    prompt, window = _count(error.get("n_prompt_tokens")), _count(error.get("n_ctx"))
    for pattern, prompt_group, window_group in _NUMBERS:
        match = pattern.search(message)
        if match:
            prompt = prompt or (int(match.group(prompt_group)) if prompt_group else None)
            window = window or int(match.group(window_group))
            break
    # A figure no model has is not learnt (a hostile server's window of 1 would stay for good; one of 10^20 breaks
    # storage): without a window the prompt is halved instead.
    prompt = prompt if prompt is not None and prompt <= MAX_PLAUSIBLE_TOKENS else None
    window = window if window is not None and MIN_PLAUSIBLE_WINDOW <= window <= MAX_PLAUSIBLE_TOKENS else None
    return prompt, window


def config_fix(provider: str, status: int) -> str | None:
    """The fix for an answer that no retry can change (401, 403, 404), or None for any other status."""
    if status not in CONFIG_STATUSES:
        return None
    table = _MODEL_FIX if status == 404 else _KEY_FIX
    return table.get(provider, "check the inference settings (automaton-min config show)")

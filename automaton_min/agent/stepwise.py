"""A small model acts in two forced steps: it picks one action, then calls that one tool (README: Local model, no
money).

The model makes both choices: nothing here maps the purpose's words to a tool. A server that does not enforce
``tool_choice`` (Ollama) may answer in text; a JSON object there is read as the call.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson

from automaton_min.agent.tools.vm import exec_headline
from automaton_min.inference.router import RoutedResult
from automaton_min.inference.types import ChatResult, Message, ToolCall, ToolSchema
from automaton_min.inference.wire_common import parse_arguments

CHOOSE = "choose_action"
# The table of actions a small model chooses among (with more than four, Gemma 3 270M chose worse: README).
SMALL_MODEL_ACTIONS = ("exec", "read_file", "write_file", "sleep")
GOAL_ACTIONS = ("complete_task",)  # joined to the table only while a goal's task is ready for the agent
LAST_RESULT_CHARS = 200
MESSAGE_CHARS = 500
PURPOSE_CHARS = 1_000
MEMORY_CHARS = 240  # a memory line
WARNING_CHARS = 300
# The inbox's messages reach a turn joined by a blank line, each opening with its label; intake escapes a label
# (with or without its colon) at the start of a line inside a message, after any line break, so this boundary is
# always a real one.
_MESSAGE_BOUNDARY = re.compile(r"\n\n(?=\[(?:external |blocked: )?message from )", re.IGNORECASE)
CHOOSE_TOKENS = 32  # an action's name in JSON
CALL_TOKENS = 400  # a call's arguments: a short file or a command
TEMPERATURE = 0.0  # unless modelStrategy.temperature says otherwise: a small model answers best undistracted
CALL_CHARS = 300  # the longest string argument a small model's call may have
_LABEL_END = re.compile(r"\s+(?:in your|when|\()|[.,;]")
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)

# Worked examples for the second step: a task and the arguments that carry it out (none of them the test's).
EXAMPLES: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    "write_file": (("Put the word hello into greeting.txt.", {"path": "greeting.txt", "content": "hello"}),
                   ("Note in todo.md that the roof needs fixing.", {"path": "todo.md", "content": "Fix the roof."})),
    "exec": (("Run the shell command `uname -a`, then rest.", {"command": "uname -a"}),
             ("Count the lines of notes.txt.", {"command": "wc -l notes.txt"})),
    "read_file": (("Tell me what notes.txt says.", {"path": "notes.txt"}),),
    "sleep": (("Nothing is left to do for an hour.", {"duration_seconds": 3600}),),
    "complete_task": (("Count the lines of notes.txt.\nLast action: exec -> 12 notes.txt", {"task_id": "k2-t1"}),),
}


@dataclass(frozen=True)
class StepInput:
    """What both steps show the model: its purpose, what it remembers, the turn's input, and the last action's
    result."""

    purpose: str
    message: str | None = None
    last_result: str | None = None
    task_id: str | None = None  # the active goal's next ready task, and what it asks: then the step's "Task:"
    task: str | None = None
    memories: tuple[str, ...] = ()  # retrieval's labelled lines for the turn's input
    warning: str | None = None  # the loop controls' warning, when it is the turn's input
    scale: float = 1.0  # the share of each line's length kept (``fitted``)

    def lines(self) -> str:
        """The purpose (or the goal's task, under the purpose), the memories, each message, a warning and the last
        result, each flattened to one capped line of its own, so that none can pass for a line of the prompt's own
        ("Task:", an example, another message) or hide another."""
        purpose_chars, message_chars = int(PURPOSE_CHARS * self.scale), int(MESSAGE_CHARS * self.scale)
        text = f"Task: {_one_line(self.purpose, purpose_chars)}"
        if self.task_id and self.task:
            text = f"Purpose: {_one_line(self.purpose, purpose_chars)}\nTask: {_one_line(self.task, purpose_chars)}"
        for memory in self.memories:
            text += f"\nYou remember: {_one_line(memory, MEMORY_CHARS)}"
        for message in _messages(self.message or ""):
            text += f"\nMessage: {_one_line(message, message_chars)}"
        if self.warning:
            text += f"\nWarning: {_one_line(self.warning.removeprefix('[system] '), WARNING_CHARS)}"
        if self.last_result:
            text += f"\nLast action: {_one_line(self.last_result, LAST_RESULT_CHARS)}"
        return text


    def fitted(self, limit_tokens: int, count: Callable[[str], int]) -> "StepInput":
        """This input within ``limit_tokens`` (as ``count`` sizes it): first without memories, then with every
        message and the purpose cut shorter, down to a tenth (many long messages, or text of many tokens a
        character, must not make a step longer than the window)."""
        step = self
        for fitted in (self, replace(self, memories=()), *(replace(self, memories=(), scale=scale)
                                                          for scale in (0.5, 0.25, 0.1))):
            step = fitted
            if count(step.lines()) <= limit_tokens:
                break
        return step


def label(description: str) -> str:
    """A tool's description cut to its opening words ("Run a shell command")."""
    return _LABEL_END.split(description.strip(), maxsplit=1)[0]


def actions(offered: tuple[ToolSchema, ...], step: StepInput) -> tuple[ToolSchema, ...]:
    """The table's actions among the tools the turn offers, in the table's order (the goal's actions while the
    step names a task)."""
    by_name = {tool.name: tool for tool in offered}
    table = SMALL_MODEL_ACTIONS + (GOAL_ACTIONS if step.task_id else ())
    return tuple(by_name[name] for name in table if name in by_name)


def choose_request(step: StepInput, choices: tuple[ToolSchema, ...]) -> tuple[tuple[Message, ...], ToolSchema]:
    """The first step's message and its only tool."""
    listed = "\n".join(f"- {tool.name}: {label(tool.description)}" for tool in choices)
    text = f"Actions:\n{listed}\n\n{step.lines()}\nWhich action comes next?"
    schema = {"type": "object", "properties": {"action": {"type": "string", "enum": [t.name for t in choices]}},
              "required": ["action"], "additionalProperties": False}
    return (Message("user", text),), ToolSchema(CHOOSE, "Choose the next action.", schema)


def acted(result: ChatResult, names: tuple[str, ...]) -> ChatResult | None:
    """When the first step's answer called a real tool instead of choosing (a server that does not enforce
    ``tool_choice``, a model that knows what it wants): the answer with its first call of an action the turn
    offers, which runs as any turn's; other calls and tools never offered are dropped. None when it chose."""
    real = [call for call in result.tool_calls if call.name != CHOOSE]
    if not real:
        return None
    offered = [call for call in real if call.name in names]
    return replace(result, tool_calls=tuple(offered[:1]))


def chosen(result: ChatResult, names: tuple[str, ...]) -> str | None:
    """The action the first step chose: from its call, else from a JSON object or a bare name in its text."""
    for call in result.tool_calls:
        if call.name == CHOOSE and call.arguments.get("action") in names:
            return call.arguments["action"]
    text = result.content.strip()
    data = _object_in(text)
    if data is not None and data[0].get("action") in names:
        return data[0]["action"]
    return text if text in names else None


def fill_request(step: StepInput, tool: ToolSchema) -> tuple[tuple[Message, ...], ToolSchema]:
    """The second step's message (worked examples, then the task) and the chosen tool, cut to what it needs.

    A string is held to ``CALL_CHARS``: a server that compiles the schema into a grammar then closes it there (a
    small model runs on until its token limit, and the cut JSON is lost), and spells out far fewer rules than
    for a ``maxLength`` of 20,000 (llama-cpp-python's server died on that one)."""
    examples = "\n\n".join(f"Task: {task}\n{tool.name} {orjson.dumps(args).decode()}"
                           for task, args in EXAMPLES.get(tool.name, ()))
    text = (f"Examples of {tool.name}:\n\n{examples}\n\n" if examples else "") + f"{step.lines()}\n{tool.name}"
    required = list(tool.parameters.get("required") or [])
    properties = {name: _bounded(spec) for name, spec in (tool.parameters.get("properties") or {}).items()
                  if name in required}
    if "task_id" in properties and step.task_id:  # the one task the step names
        properties["task_id"] = {"type": "string", "enum": [step.task_id]}
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return (Message("user", text),), ToolSchema(tool.name, tool.description, schema)


def the_call(result: ChatResult, name: str) -> ChatResult:
    """The second step's answer with its one call: the tool call, else a JSON object in its text read as one."""
    calls = tuple(call for call in result.tool_calls if call.name == name)
    if calls:
        return replace(result, tool_calls=calls[:1])
    data = _object_in(result.content)
    if data is not None:
        return replace(result, content="", tool_calls=(ToolCall("call_text_0", name, *data),))
    return replace(result, tool_calls=())  # another tool than the one chosen is not run


def done(name: str, result: str, error: str | None) -> str:
    """The last action as the next step shows it: the tool and its result's (or error's) first line; for a
    command, its exit code and the first line it printed, which is what it found out."""
    if error is None and (headline := exec_headline(result)) is not None:
        return f"{name} -> {headline}"
    text = f"error: {error}" if error is not None else result
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return f"{name} -> {line}"


def combined(first: RoutedResult, second: RoutedResult) -> RoutedResult:
    """The turn's result: the second step's answer, with the tokens, cost and time of both."""
    return replace(second, input_tokens=first.input_tokens + second.input_tokens,
                   output_tokens=first.output_tokens + second.output_tokens,
                   cost_cents=first.cost_cents + second.cost_cents,
                   usage_estimated=first.usage_estimated or second.usage_estimated,
                   latency_ms=first.latency_ms + second.latency_ms)


def _bounded(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter's type (and enum), a string at most ``CALL_CHARS`` long."""
    kept = {key: value for key, value in schema.items() if key in ("type", "enum", "items")}
    if kept.get("type") == "string" and "enum" not in kept:
        kept["maxLength"] = min(int(schema.get("maxLength") or CALL_CHARS), CALL_CHARS)
    return kept


def _messages(text: str) -> list[str]:
    return [part for part in _MESSAGE_BOUNDARY.split(text) if part.strip()]


def _one_line(text: str, limit: int) -> str:
    return " ".join(text.split())[:limit]


def _object_in(text: str) -> tuple[dict[str, Any], str] | None:
    """The JSON object in a text answer and its text, read as a server's arguments are (inference/wire_common.py:
    the same limits), or None."""
    match = _JSON_OBJECT.search(text)
    if not match:
        return None
    arguments, raw, error = parse_arguments(match.group(0))
    return None if error is not None else (arguments, raw)

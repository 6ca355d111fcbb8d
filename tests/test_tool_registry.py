"""The tool registry and argument validation: every failure is a readable result, never an exception."""

from __future__ import annotations

import pytest

from automaton_min.agent.tools.base import Tool, ToolContext, ToolFailure, ToolSpec
from automaton_min.agent.tools.registry import MAX_RESULT_CHARS, ToolRegistry, cap
from automaton_min.agent.tools.validate import validate

EXEC_SCHEMA = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "minLength": 1, "maxLength": 100},
        "timeout": {"type": "integer", "minimum": 1, "maximum": 600},
        "mode": {"enum": ["fast", "slow"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "port": {"type": ["integer", "null"]},
    },
    "required": ["command"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(("arguments", "problem"), [
    ({}, "command: missing (required)"),
    ({"command": 5}, "command: expected a string, got a whole number"),
    ({"command": ""}, "command: expected at least 1 characters"),
    ({"command": "x" * 101}, "command: expected at most 100 characters"),
    ({"command": "ls", "timeout": "10"}, "timeout: expected a whole number, got a string"),
    ({"command": "ls", "timeout": True}, "timeout: expected a whole number, got a boolean"),
    ({"command": "ls", "timeout": 0}, "timeout: expected at least 1"),
    ({"command": "ls", "timeout": 601}, "timeout: expected at most 600"),
    ({"command": "ls", "mode": "medium"}, "mode: expected one of 'fast', 'slow'"),
    ({"command": "ls", "tags": ["a", 1]}, "tags[1]: expected a string"),
    ({"command": "ls", "tags": ["a", "b", "c"]}, "tags: expected at most 2 items"),
    ({"command": "ls", "rm": True}, "rm: not an argument of this tool"),
    ({"command": "ls", "port": "80"}, "port: expected a whole number or null"),
])
def test_each_rule_gives_a_readable_error(arguments: dict, problem: str) -> None:
    assert any(problem in p for p in validate(arguments, EXEC_SCHEMA)), validate(arguments, EXEC_SCHEMA)


@pytest.mark.parametrize("arguments", [{"command": "ls"}, {"command": "ls", "timeout": 5, "mode": "fast", "tags": ["a"], "port": None}])
def test_fitting_arguments_pass(arguments: dict) -> None:
    assert validate(arguments, EXEC_SCHEMA) == []


def test_non_object_arguments_are_named() -> None:
    assert validate([], EXEC_SCHEMA) == ["arguments: expected an object, got a list"]


def make_registry(run) -> ToolRegistry:
    spec = ToolSpec("exec", "Run a command.", EXEC_SCHEMA, "vm", risk="caution", mutating=True)
    echo = ToolSpec("echo", "Echo.", {"type": "object", "properties": {"text": {"type": "string"}}}, "test")
    return ToolRegistry([Tool(spec, run), Tool(echo, lambda ctx, a: a.get("text", ""))])


@pytest.fixture
def ctx(clock) -> ToolContext:
    return ToolContext(db=None, config={}, now=clock, turn_id="turn-1")


def test_a_call_runs_and_reports_its_duration(ctx) -> None:
    ticks = iter([10.0, 10.25])
    outcome = make_registry(lambda c, a: f"ran {a['command']} in {c.turn_id}").execute(
        ctx, "call_1", "exec", {"command": "ls"}, monotonic=lambda: next(ticks))
    assert (outcome.ok, outcome.result, outcome.duration_ms, outcome.call_id) == (True, "ran ls in turn-1", 250, "call_1")


@pytest.mark.parametrize(("name", "arguments", "options", "error"), [
    ("shell", {"command": "ls"}, {}, "unknown tool 'shell'; available: echo, exec"),
    ("exec", {}, {"argument_error": "Expecting value: line 1"}, "were not a JSON object"),
    ("exec", {"command": 3}, {}, "invalid arguments: command: expected a string"),
    ("exec", {"command": "rm -rf /"}, {"authorize": lambda spec, a: "FORBIDDEN_COMMAND: no"}, "blocked by policy: FORBIDDEN_COMMAND: no"),
])
def test_failures_before_running_are_results(ctx, name, arguments, options, error) -> None:
    ran = []
    outcome = make_registry(lambda c, a: ran.append(a) or "x").execute(ctx, "c", name, arguments, **options)
    assert error in outcome.error and outcome.result == "" and ran == []


def test_tool_failures_and_crashes_are_results(ctx) -> None:
    def failing(c, a):
        raise ToolFailure("the sandbox said no")

    def crashing(c, a):
        return {}["missing"]

    assert make_registry(failing).execute(ctx, "c", "exec", {"command": "ls"}).error == "the sandbox said no"
    crash = make_registry(crashing).execute(ctx, "c", "exec", {"command": "ls"})
    assert crash.error.startswith("exec failed unexpectedly: KeyError")


def test_results_are_capped(ctx) -> None:
    outcome = make_registry(lambda c, a: "y" * (MAX_RESULT_CHARS + 50)).execute(ctx, "c", "exec", {"command": "ls"})
    assert outcome.result.endswith("[truncated: 50 more characters]") and len(outcome.result) < MAX_RESULT_CHARS + 60
    assert cap("short") == "short"


def test_schemas_and_registry_rules() -> None:
    registry = make_registry(lambda c, a: "")
    assert [s.name for s in registry.specs()] == ["exec", "echo"] and "exec" in registry
    with pytest.raises(ValueError, match="two tools"):
        ToolRegistry([Tool(registry.get("echo").spec, lambda c, a: ""), Tool(registry.get("echo").spec, lambda c, a: "")])
    with pytest.raises(ValueError, match="object schema"):
        ToolRegistry([Tool(ToolSpec("bad", "", {"type": "string"}, "x"), lambda c, a: "")])


def test_errors_are_capped_like_results(ctx) -> None:
    def failing(c, a):
        raise ToolFailure("z" * (MAX_RESULT_CHARS + 70))

    outcome = make_registry(failing).execute(ctx, "c", "exec", {"command": "ls"})
    assert outcome.error.endswith("[truncated: 70 more characters]") and len(outcome.error) < MAX_RESULT_CHARS + 60

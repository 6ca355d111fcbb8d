"""A small JSON-schema validator for tool arguments: the subset tool schemas use, with readable errors.

Supported: ``type`` (one or a list), ``properties``, ``required``, ``additionalProperties: false``, ``enum``,
``minimum``/``maximum``, ``minLength``/``maxLength``, ``pattern``, ``items``, ``minItems``/``maxItems``. Errors name
the argument path: ``command: expected a string``.
"""

from __future__ import annotations

import re
from typing import Any

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}
_ARTICLE = {"object": "an object", "integer": "a whole number", "array": "a list", "null": "null"}


def validate(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Every way ``value`` breaks ``schema`` (an empty list when it fits)."""
    where = path or "arguments"
    kinds = schema.get("type")
    if kinds is not None:
        allowed = kinds if isinstance(kinds, list) else [kinds]
        if not any(_TYPES[k](value) for k in allowed if k in _TYPES):
            wanted = " or ".join(_ARTICLE.get(k, f"a {k}") for k in allowed)
            return [f"{where}: expected {wanted}, got {_describe(value)}"]
    problems: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: expected one of {', '.join(map(repr, schema['enum']))}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            problems.append(f"{where}: expected at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"{where}: expected at most {schema['maxLength']} characters")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append(f"{where}: does not match the pattern {schema['pattern']}")
    if _TYPES["number"](value):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{where}: expected at least {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{where}: expected at most {schema['maximum']}")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{_join(path, name)}: missing (required)")
        for name, item in value.items():
            if name in properties:
                problems += validate(item, properties[name], _join(path, name))
            elif schema.get("additionalProperties") is False:
                problems.append(f"{_join(path, name)}: not an argument of this tool")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            problems.append(f"{where}: expected at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(f"{where}: expected at most {schema['maxItems']} items")
        if isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                problems += validate(item, schema["items"], f"{where}[{index}]")
    return problems


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _describe(value: Any) -> str:
    for name, check in _TYPES.items():
        if name != "number" and check(value):
            return _ARTICLE.get(name, f"a {name}")
    return "a number" if _TYPES["number"](value) else type(value).__name__

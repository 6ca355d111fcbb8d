"""Logging: JSON lines for journald and pipes, a readable line on a terminal. ``extra={...}`` fields become keys (or
``key=value``), and every line passes a scrubber of registered secrets, behind code that never logs them.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from typing import IO

import orjson

from automaton_min.clock import to_iso

ROOT_LOGGER = "automaton_min"

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}

LOG_LEVEL_NAMES = tuple(_LEVELS)

_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}

# C0 but tab, DEL, C1; zero-width and direction marks, bidi embeddings, overrides and isolates, line and paragraph
# separators, the byte order mark: a text that reorders or hides what the terminal shows
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")

_secrets: set[str] = set()
_secrets_lock = threading.Lock()


def register_secret(value: str) -> None:
    """Never let ``value`` (nor its ``0x``-less or lower/upper-case form) reach a log line."""
    if not value or len(value) < 8:
        return
    bare = value[2:] if value.lower().startswith("0x") else value
    with _secrets_lock:
        _secrets.update({value, bare, bare.lower(), bare.upper()})


def scrub(text: str) -> str:
    """Replace every registered secret in ``text`` with ``[redacted]``."""
    with _secrets_lock:
        found = [s for s in _secrets if s in text]
    for secret in sorted(found, key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    return text


def _fields(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, then the extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": to_iso(int(record.created * 1000)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_fields(record))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return scrub(orjson.dumps(entry, default=str).decode())


class TextFormatter(logging.Formatter):
    """``HH:MM:SS level logger: message key=value ...`` for people at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = to_iso(int(record.created * 1000))[11:19]
        extras = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        line = f"{stamp} {record.levelname.lower():<7} {record.name}: {record.getMessage()}"
        line = printable(line + "  " + extras if extras else line)  # a tool's error may hold the model's text
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return scrub(line)


def level_number(name: str) -> int:
    """The ``logging`` level for a config ``logLevel`` name."""
    return _LEVELS[name.lower()]


def configure_logging(level: str = "info", stream: IO[str] | None = None, json_lines: bool | None = None) -> None:
    """Send this package's logs to ``stream`` (stderr) at ``level``; ``json_lines`` defaults to "not a terminal"."""
    stream = stream if stream is not None else sys.stderr
    if json_lines is None:
        json_lines = not (hasattr(stream, "isatty") and stream.isatty())
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root = logging.getLogger(ROOT_LOGGER)
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level_number(level))
    root.propagate = False


def get_logger(name: str) -> logging.Logger:
    """A logger under this package's root (``automaton_min.<name>``)."""
    if name.startswith(ROOT_LOGGER):
        return logging.getLogger(name)
    return logging.getLogger(f"{ROOT_LOGGER}.{name}")


def short(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: each control or invisible formatting character (``_CONTROL``) written as
    ``\\u001b``, which is still valid inside JSON."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)

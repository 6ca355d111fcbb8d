"""Import a reference runtime's ``heartbeat.yml`` into ``heartbeat_schedule``, once (README: Heartbeat).

The reader knows the reference's shape only: an ``entries`` list of flat ``key: value`` maps (deeper lines such as
``params`` are ignored), quoted or plain scalars, ``#`` comments. An imported entry sets its task's cron and enabled
flag; later edits in the database win.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable

from automaton_min.clock import to_iso
from automaton_min.cron import validate
from automaton_min.heartbeat.schedule import TaskDefault
from automaton_min.log import get_logger
from automaton_min.store.kv import get_value, set_value

if TYPE_CHECKING:
    from automaton_min.config import Config
    from automaton_min.home import Home
    from automaton_min.store.db import Database

log = get_logger(__name__)

IMPORTED_KEY = "heartbeat_yml_imported"
_PAIR = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*)")


def _strip_comment(text: str) -> str:
    quote = None
    for i, ch in enumerate(text):
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip()
    return text.rstrip()


def _scalar(text: str) -> str | bool | None:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text.lower() in ("true", "yes", "on"):
        return True
    if text.lower() in ("false", "no", "off"):
        return False
    if text in ("", "~", "null"):
        return None
    if text[0] in "[{&*!|>'\"":
        raise ValueError(f"unsupported value {text[:40]!r}")
    return text


def read_entries(text: str) -> tuple[list[dict[str, object]], list[str]]:
    """The ``entries`` of a heartbeat.yml, and a warning per part that could not be read."""
    entries: list[dict[str, object]] = []
    warnings: list[str] = []
    in_entries = False
    current: dict[str, object] | None = None
    key_indent = -1
    broken = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw)
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if indent == 0:
            in_entries = body == "entries:"
            continue
        if not in_entries:
            continue
        if body.startswith("- ") or body == "-":
            if current is not None and not broken:
                entries.append(current)
            current, broken = {}, False
            key_indent = indent + len(body) - len(body[1:].lstrip())  # the column of the first key
            body = body[1:].strip()
            if not body:
                continue
        elif current is None:
            warnings.append(f"line {number}: not part of an entry")
            continue
        elif indent > key_indent:
            continue  # nested (params): not needed
        match = _PAIR.fullmatch(body)
        if match is None:
            warnings.append(f"line {number}: cannot read {body[:40]!r}")
            broken = True
            continue
        try:
            current[match.group(1)] = _scalar(match.group(2))
        except ValueError as exc:
            warnings.append(f"line {number}: {exc}")
            broken = True
    if current is not None and not broken:
        entries.append(current)
    return entries, warnings


def import_once(db: "Database", home: "Home", config: "Config", known_tasks: Iterable[str], now_ms: int,
                defaults: Iterable[TaskDefault] = ()) -> list[str] | None:
    """Import heartbeat.yml if it exists and was never imported; the tasks imported, or None when not run."""
    if get_value(db, IMPORTED_KEY) is not None:
        return None
    path = home.resolve(config.get("heartbeatConfigPath") or "~/.automaton/heartbeat.yml")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("heartbeat.yml unreadable; not imported", extra={"path": str(path), "error": str(exc)})
        return None
    from automaton_min.heartbeat.tasks import DEFAULT_SCHEDULE

    known = set(known_tasks)
    by_name = {d.name: d for d in (*DEFAULT_SCHEDULE, *defaults)}
    entries, warnings = read_entries(text)
    for warning in warnings:
        log.warning("heartbeat.yml: skipped a part it cannot read", extra={"path": str(path), "problem": warning})
    imported: list[str] = []
    stamp = to_iso(now_ms)
    with db.transaction():
        for entry in entries:
            task = entry.get("task") or entry.get("name")
            cron = entry.get("schedule")
            enabled = entry.get("enabled", True)
            problem = None
            if not isinstance(task, str) or task not in known:
                problem = f"unknown task {task!r}"
            elif not isinstance(cron, str) or validate(cron):
                problem = f"schedule {cron!r}: {validate(cron) if isinstance(cron, str) else 'missing'}"
            elif not isinstance(enabled, bool):
                problem = f"enabled {enabled!r} is not true or false"
            if problem:
                log.warning("heartbeat.yml: entry skipped",
                            extra={"entry": str(entry.get("name"))[:64], "problem": problem})
                continue
            d = by_name.get(task, TaskDefault(task, cron))
            db.execute("INSERT INTO heartbeat_schedule (task_name, cron_expression, enabled, priority, timeout_ms,"
                       " max_retries, tier_minimum, run_count, fail_count, created_at, updated_at)"
                       " VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?) ON CONFLICT(task_name) DO UPDATE SET"
                       " cron_expression = excluded.cron_expression, enabled = excluded.enabled,"
                       " updated_at = excluded.updated_at",
                       (task, cron, int(enabled), d.priority, d.timeout_ms, d.max_retries, d.tier_minimum, stamp,
                        stamp))
            imported.append(task)
        set_value(db, IMPORTED_KEY, stamp, now_ms)
    log.info("heartbeat.yml imported", extra={"path": str(path), "tasks": imported})
    return imported

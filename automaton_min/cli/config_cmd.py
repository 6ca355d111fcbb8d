"""``automaton-min config show|set|unset``: read and change ``automaton.json`` (README: Commands)."""

from __future__ import annotations

import copy
import difflib
import os
from typing import Any

import click
import orjson

from automaton_min.cli.common import emit_json, home_of, json_errors, load_config_for, secret_input

_MISSING = object()


@click.group("config")
def command() -> None:
    """Inspect and change the configuration (automaton.json)."""


@command.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the output is always JSON; accepted for symmetry).")
@click.pass_context
def show(ctx: click.Context, as_json: bool) -> None:
    """Print the effective configuration (file, defaults and environment) with secrets masked."""
    with json_errors(as_json):
        config = load_config_for(ctx)
    emit_json(config.redacted())


@command.command("set", context_settings={"ignore_unknown_options": True})  # VALUE may be -5
@click.argument("key")
@click.argument("value", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def set_value(ctx: click.Context, key: str, value: str, as_json: bool) -> None:
    """Set KEY (dotted for nested values) to VALUE (JSON when it parses, else text).

    \b
    Examples:
      automaton-min config set treasuryPolicy.maxSingleTransferCents 2000
      automaton-min config set logLevel debug
      automaton-min config set treasuryPolicy.x402AllowedDomains '["conway.tech"]'
      automaton-min config set name '"42"'      (the text 42, not the number)
      automaton-min config set openaiApiKey      (an API key: asked for, or read from standard input with -)
    """
    from automaton_min.config import SECRET_KEYS

    with json_errors(as_json):
        if key in SECRET_KEYS:
            value = secret_input("prompt" if value is None else value, key)
        elif value is None:
            raise click.UsageError("Missing argument 'VALUE'.")
        change = _change(ctx, key, value if key in SECRET_KEYS else _parse(value), raw=value)
    _report(change, as_json)


@command.command("unset")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def unset_value(ctx: click.Context, key: str, as_json: bool) -> None:
    """Remove KEY from automaton.json, so its default (if any) applies again."""
    with json_errors(as_json):
        change = _change(ctx, key, _MISSING, raw=None)
    _report(change, as_json)


def _parse(raw: str) -> Any:
    """VALUE as JSON when it parses, else the text itself."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw


def _change(ctx: click.Context, key: str, new: Any, *, raw: str | None) -> dict[str, Any]:
    """Validate and write one change; return what the report needs."""
    from automaton_min.config import (CONFIG_JSON_FIX, DEFAULTS, RULES, SECRET_KEYS, _read_json_object, deep_merge,
                                      validate)
    from automaton_min.errors import ConfigError
    from automaton_min.fileio import file_mode

    home = home_of(ctx)
    home.require()
    path = home.config_path
    data = _read_json_object(path, CONFIG_JSON_FIX)
    parts = key.split(".")
    if not key or any(not part for part in parts):
        raise ConfigError(f"{key!r} is not a key; keys look like logLevel or treasuryPolicy.maxSingleTransferCents")
    _require_known(key, data, RULES, DEFAULTS)
    if new is None:
        raise ConfigError(f"{key}: null is not a value; to go back to the default run: "
                          f"automaton-min config unset {key}")
    secret = parts[-1] in SECRET_KEYS

    before = deep_merge(DEFAULTS, data)
    old = _get(before, parts)
    updated = copy.deepcopy(data)
    if new is _MISSING:
        _remove(updated, parts)
    else:
        _put(updated, parts, new)
    try:
        validate(deep_merge(DEFAULTS, updated))
    except ConfigError as exc:
        hint = ""
        if raw is not None and not isinstance(new, str) and RULES.get(key) is not None and RULES[key](raw) is None:
            hint = f" (VALUE is read as JSON; for the text, quote it: '\"{'...' if secret else raw}\"')"
        raise ConfigError(f"{exc}{hint}; nothing was changed") from None
    after = _get(deep_merge(DEFAULTS, updated), parts)

    changed = updated != data
    mode = file_mode(path)
    if changed:
        _write(path, updated, mode)
    from automaton_min.runtime.run_lock import run_holder

    running, pid = run_holder(home)
    notes = []
    override = next((env for env, name in _env_overrides().items() if name == key and os.environ.get(env)), None)
    if override:
        notes.append(f"{override} is set in this environment and overrides {key} for commands run with it")
    if key == "localOnly" and after is True and changed:
        notes.append("local only: no social relay and no RPC node; the agent reads no balance, pays nothing and gets "
                     "no messages (automaton-min config set localOnly false undoes it)")
    if secret and new is not _MISSING and mode & 0o077:
        notes.append(f"{path} is readable by others (mode {mode:04o}); run: chmod 600 {path}")
    return {
        "key": key, "old": _shown(old, secret), "new": _shown(after, secret), "changed": changed,
        "file": str(path), "running": running, "pid": pid, "notes": notes,
    }


def _env_overrides() -> dict[str, str]:
    from automaton_min.config import ENV_OVERRIDES

    return ENV_OVERRIDES


def _write(path, data: dict[str, Any], mode: int) -> None:
    """Atomic write with the file's old mode; run as root on another user's home, the owner is kept too."""
    from automaton_min.fileio import atomic_write

    owner = os.stat(path)
    atomic_write(path, orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n", mode)
    if os.geteuid() == 0 and (owner.st_uid, owner.st_gid) != (0, 0):
        os.chown(path, owner.st_uid, owner.st_gid)


def _require_known(key: str, data: dict[str, Any], rules: dict[str, Any], defaults: dict[str, Any]) -> None:
    """Refuse a key neither this program nor the file knows, naming the nearest known one."""
    from automaton_min.errors import ConfigError

    known = set(rules) | set(_paths(defaults, leaves_only=True))
    sections = {k.split(".")[0] for k in known if "." in k}
    if key in sections:
        example = sorted(k for k in known if k.startswith(key + "."))[0]
        raise ConfigError(f"{key} is a section; set its keys one at a time, "
                          f"e.g. automaton-min config set {example} VALUE")
    if key in known or key in set(_paths(data, leaves_only=False)):
        return
    raise ConfigError(f"unknown key {key}{_suggestion(key, known)}")


def _suggestion(key: str, known: set[str]) -> str:
    """``; did you mean X?`` for the nearest known key: same spelling in another case, same last part, or difflib."""
    ordered = sorted(known)
    lower = {k.lower(): k for k in ordered}
    leaf = key.split(".")[-1].lower()
    leaves = {}
    for k in ordered:
        leaves.setdefault(k.split(".")[-1].lower(), k)
    nearest = lower.get(key.lower()) or leaves.get(leaf)
    if nearest is None:
        close = difflib.get_close_matches(key.lower(), list(lower), n=1, cutoff=0.6)
        nearest = lower[close[0]] if close else None
    if nearest is None:
        close = difflib.get_close_matches(leaf, list(leaves), n=1, cutoff=0.6)
        nearest = leaves[close[0]] if close else None
    if nearest is None:
        return "; the keys are listed in README.md (Configuration), the values in: automaton-min config show"
    return f"; did you mean {nearest}?"


def _paths(data: Any, *, leaves_only: bool, prefix: str = "") -> list[str]:
    found = []
    for name, value in data.items():
        dotted = f"{prefix}{name}"
        if isinstance(value, dict) and value:
            if not leaves_only:
                found.append(dotted)
            found.extend(_paths(value, leaves_only=leaves_only, prefix=dotted + "."))
        else:
            found.append(dotted)
    return found


def _get(data: Any, parts: list[str]) -> Any:
    node = data
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _put(data: dict[str, Any], parts: list[str], value: Any) -> None:
    from automaton_min.errors import ConfigError

    node = data
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{'.'.join(parts[:depth + 1])}: expected an object in the file; fix it first")
        node = child
    node[parts[-1]] = value


def _remove(data: dict[str, Any], parts: list[str]) -> None:
    node = _get(data, parts[:-1]) if len(parts) > 1 else data
    if isinstance(node, dict):
        node.pop(parts[-1], None)


def _shown(value: Any, secret: bool) -> Any:
    """A value as the report shows it: ``None`` when unset, secrets masked."""
    from automaton_min.config import redact_secret

    if value is _MISSING or value is None:
        return None
    if secret:
        return redact_secret(value) if isinstance(value, str) and value else "****"
    return value


def _text(value: Any) -> str:
    return "(unset)" if value is None else orjson.dumps(value).decode()


def _report(change: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json({k: change[k] for k in ("key", "old", "new", "changed", "file", "running", "pid", "notes")})
        return
    if not change["changed"]:
        click.echo(f"{change['key']}: {_text(change['new'])} (unchanged)")
    else:
        click.echo(f"{change['key']}: {_text(change['old'])} -> {_text(change['new'])}")
        if change["running"]:
            where = f" (pid {change['pid']})" if change["pid"] else ""
            click.echo(f"The running agent{where} picks this up at its next start; restart it to apply it now.")
    for note in change["notes"]:
        click.echo(f"Note: {note}")

"""Helpers the commands share: the home from the context, logging, output."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
import orjson

from automaton_min.config import Config, load_config
from automaton_min.errors import AutomatonError
from automaton_min.home import Home
from automaton_min.log import configure_logging, printable


def home_of(ctx: click.Context) -> Home:
    """The ``Home`` chosen by ``--home`` / ``AUTOMATON_HOME`` / the default."""
    return ctx.find_root().obj["home"]


def load_config_for(ctx: click.Context) -> Config:
    """Load the config of this home and apply its ``logLevel`` (unless ``--log-level`` was given)."""
    home = home_of(ctx)
    home.require()
    config = load_config(home)
    if not ctx.find_root().obj.get("log_level"):
        configure_logging(config.get("logLevel", "info"), sys.stderr)
    return config


def quiet_logs(ctx: click.Context) -> None:
    """Warnings and errors only, unless ``--log-level`` was given: the command's own lines say what it did."""
    if not ctx.find_root().obj.get("log_level"):
        configure_logging("warning", sys.stderr)


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout; no control character raw (orjson leaves DEL and C1 as they are)."""
    click.echo("\n".join(map(printable, orjson.dumps(data, option=orjson.OPT_INDENT_2).decode().split("\n"))))


def terminal_progress(as_json: bool) -> Callable[[str], None]:
    """Where a slow command says what it is doing: stderr when that is a terminal and the output is not JSON."""
    def show(text: str) -> None:
        if not as_json and sys.stderr.isatty():
            click.echo(text, err=True)
    return show


def emit_rows(rows: list[tuple[str, Any]]) -> None:
    """Print aligned ``label  value`` lines (control characters made visible: values may hold the model's text)."""
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        click.echo(printable(f"  {label:<{width}}  {'-' if value in (None, '') else value}"))


@contextmanager
def json_errors(as_json: bool) -> Iterator[None]:
    """With ``--json``, an error is ``{"error", "fix"}`` on stdout (and its exit code) instead of a line on stderr."""
    try:
        yield
    except AutomatonError as exc:
        if not as_json:
            raise
        problem, fix = getattr(exc, "problem", None), getattr(exc, "fix", None)
        if problem is None:
            problem, _, fix = str(exc).rpartition("; ") if "; " in str(exc) else (str(exc), "", None)
        emit_json({"error": with_home(problem, click.get_current_context()),
                   "fix": with_home(fix, click.get_current_context()) if fix else fix})
        raise click.exceptions.Exit(exc.exit_code) from None


# A suggested command, not a path that ends in the program's name (/usr/local/bin/automaton-min is ...).
_SUGGESTED_COMMAND = re.compile(r"(?<![\w/.~-])automaton-min (?=[a-z])")


def with_home(text: str, ctx: click.Context) -> str:
    """``text`` with each suggested ``automaton-min <command>`` naming the ``--home`` typed on the command line, if any
    (a home chosen with ``AUTOMATON_HOME`` stays chosen while the variable is set)."""
    root = ctx.find_root()
    if root.get_parameter_source("home") is not ParameterSource.COMMANDLINE or not root.obj:
        return text
    return repeat_home(text, root.obj["home"].root)


def repeat_home(text: str, home: Path) -> str:
    """Each ``automaton-min <command>`` suggested in ``text`` with ``--home home`` (unless it is the default)."""
    if home == (Path.home() / ".automaton").absolute():
        return text
    return _SUGGESTED_COMMAND.sub(f"automaton-min --home {shlex.quote(str(home))} ", text)


def secret_input(given: str | None, name: str) -> str | None:
    """A secret from standard input (``-``), or a hidden prompt (``prompt``); never from the command line, which
    every process on the machine can read (``/proc/PID/cmdline``), the agent's confined commands included."""
    if given is None:
        return None
    if given not in ("-", "prompt"):
        from automaton_min.errors import UserError

        raise UserError(f"{name} on the command line is readable by every process here; give - and pipe the key "
                        f"in (printf %s \"$KEY\" | automaton-min ... {name} -), or leave the value out to be asked")
    value = click.prompt(name, hide_input=True) if given == "prompt" and sys.stdin.isatty() else sys.stdin.readline()
    if not value.strip():
        from automaton_min.errors import UserError

        raise UserError(f"no value for {name} came on standard input; pipe the key in, or run it on a terminal")
    return value.strip()

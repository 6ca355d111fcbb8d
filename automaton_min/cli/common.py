"""Helpers the commands share: the home from the context, logging, output."""

from __future__ import annotations

import sys
from typing import Any

import click
import orjson

from automaton_min.config import Config, load_config
from automaton_min.home import Home
from automaton_min.observe.log import configure_logging


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


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout."""
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())


def emit_rows(rows: list[tuple[str, Any]]) -> None:
    """Print aligned ``label  value`` lines."""
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        click.echo(f"  {label:<{width}}  {'-' if value in (None, '') else value}")

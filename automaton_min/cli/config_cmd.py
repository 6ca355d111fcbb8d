"""``automaton-min config show``: the effective configuration, secrets masked."""

from __future__ import annotations

import click

from automaton_min.cli.common import emit_json, load_config_for


@click.group("config")
def command() -> None:
    """Inspect the configuration."""


@command.command("show")
@click.pass_context
def show(ctx: click.Context) -> None:
    """Print the effective configuration (file, defaults and environment) with secrets masked."""
    emit_json(load_config_for(ctx).redacted())

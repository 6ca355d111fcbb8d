"""``automaton-min status``: name, address, state and turns."""

from __future__ import annotations

import click

from automaton_min.cli.common import emit_json, emit_rows, home_of, load_config_for
from automaton_min.runtime.status import gather_status


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def command(ctx: click.Context, as_json: bool) -> None:
    """Show who the automaton is and what it is doing."""
    info = gather_status(home_of(ctx), load_config_for(ctx))
    if as_json:
        emit_json(info)
        return
    click.echo(f"{info['name']}  (automaton-min {info['version']})")
    emit_rows([
        ("address", info["address"]),
        ("creator", info["creator"]),
        ("sandbox", info["sandbox"] or "local"),
        ("state", info["state"]),
        ("turns", info["turns"]),
        ("last turn", info["lastTurnAt"]),
        ("model", info["model"]),
        ("home", info["home"]),
    ])

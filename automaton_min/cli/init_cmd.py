"""``automaton-min init``: create the home directory and the wallet."""

from __future__ import annotations

import click

from automaton_min.cli.common import emit_json, home_of
from automaton_min.runtime.genesis import init_home


@click.command("init")
@click.pass_context
def command(ctx: click.Context) -> None:
    """Create the home directory (0700) and a wallet (0600) if missing; print the address as JSON."""
    home = home_of(ctx)
    wallet, created = init_home(home)
    emit_json({"address": wallet.address, "home": str(home.root), "isNew": created})

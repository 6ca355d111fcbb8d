"""``automaton-min init``: create the home directory and the wallet."""

from __future__ import annotations

import sys

import click

from automaton_min.cli.common import emit_json, home_of, quiet_logs, with_home
from automaton_min.runtime.genesis import init_home


@click.command("init")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the default when stdout is not a terminal).")
@click.pass_context
def command(ctx: click.Context, as_json: bool) -> None:
    """Create the home directory (0700) and a wallet (0600) if missing; print the address.

    On a terminal it says what it made and what to run next; piped (or with --json) it prints
    {"address", "home", "isNew"}."""
    quiet_logs(ctx)
    home = home_of(ctx)
    wallet, created = init_home(home)
    if as_json or not sys.stdout.isatty():
        emit_json({"address": wallet.address, "home": str(home.root), "isNew": created})
        return
    what = "Made a wallet" if created else "The wallet is already there"
    click.echo(f"{what} in {home.root}: {wallet.address}")
    click.echo(f"  its key: {home.wallet_path} (mode 0600, never printed)")
    if home.config_path.exists():
        click.echo(with_home("Next: automaton-min run", ctx))
    else:
        click.echo(with_home("Next, to make it an agent: automaton-min setup (or give the address to an agent's "
                             "setup as its creator)", ctx))

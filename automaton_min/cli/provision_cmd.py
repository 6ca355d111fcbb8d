"""``automaton-min provision``: get a Conway API key by signing in with the wallet (SIWE)."""

from __future__ import annotations

import click

from automaton_min.cli.common import emit_json, home_of, json_errors, terminal_progress
from automaton_min.config import load_config
from automaton_min.runtime.money import provision_key


@click.command("provision")
@click.option("--api-url", envvar="CONWAY_API_URL",
              help="Conway API base URL (env CONWAY_API_URL; default: the config's conwayApiUrl).")
@click.option("--json", "as_json", is_flag=True,
              help="Errors as a JSON object on stdout too (the result is always JSON).")
@click.pass_context
def command(ctx: click.Context, api_url: str | None, as_json: bool) -> None:
    """Sign in to Conway with the wallet and save a new API key to config.json (0600)."""
    home = home_of(ctx)
    with json_errors(as_json):
        config = load_config(home) if home.config_path.exists() else None
        result = provision_key(home, config, api_url, progress=terminal_progress(as_json))
    emit_json({"walletAddress": result.wallet_address, "keyPrefix": result.key_prefix, "saved": str(result.saved_to)})

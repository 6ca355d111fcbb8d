"""``automaton-min topup USD``: buy Conway credits with USDC (x402)."""

from __future__ import annotations

import click

from automaton_min.cli.common import emit_json, emit_rows, home_of, json_errors, load_config_for, terminal_progress
from automaton_min.runtime.money import buy_credits
from automaton_min.treasury.money_out import TOPUP_TIERS_USD


@click.command("topup")
@click.argument("usd", type=click.Choice([str(t) for t in TOPUP_TIERS_USD]), metavar="USD")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def command(ctx: click.Context, usd: str, as_json: bool) -> None:
    """Buy USD dollars of credits (one of 5, 25, 100, 500, 1000, 2500), paid in USDC from the wallet."""
    with json_errors(as_json):
        result = buy_credits(home_of(ctx), load_config_for(ctx), int(usd), progress=terminal_progress(as_json))
    if as_json:
        emit_json({"usd": result.usd, "creditsCentsAdded": result.credits_cents_added, "intent": result.intent_id,
                   "transaction": result.tx_hash})
        return
    emit_rows([("bought", f"${result.usd} of credits"), ("credits added", f"{result.credits_cents_added} cents"),
               ("intent", result.intent_id), ("transaction", result.tx_hash)])

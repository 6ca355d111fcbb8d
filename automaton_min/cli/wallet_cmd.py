"""``automaton-min wallet``: the address and its USDC balance on Base."""

from __future__ import annotations

import click

from automaton_min.chain.usdc import BASE, NETWORKS, network_named
from automaton_min.cli.common import emit_json, emit_rows, home_of, json_errors, load_config_for
from automaton_min.runtime.money import wallet_report


@click.command("wallet")
@click.option("--network", type=click.Choice([n.v1_name for n in NETWORKS]), default=BASE.v1_name, show_default=True,
              help="Which chain's USDC to read.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def command(ctx: click.Context, network: str, as_json: bool) -> None:
    """Show the wallet address and its USDC balance (read from the chain through rpcUrl)."""
    with json_errors(as_json):
        report = wallet_report(home_of(ctx), load_config_for(ctx), network_named(network))
    if as_json:
        emit_json(report)
        return
    if report.get("localOnly"):
        from automaton_min.config import LOCAL_ONLY_OFF

        emit_rows([("address", report["address"]),
                   ("USDC", f"not read: local only (no RPC node); to read it: {LOCAL_ONLY_OFF}")])
        return
    emit_rows([("address", report["address"]), ("USDC", f"{report['usdc']} on {report['network']}"),
               ("rpc", report["rpcUrl"])])

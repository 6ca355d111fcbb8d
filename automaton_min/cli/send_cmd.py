"""``automaton-min send TO MESSAGE``: a signed message to another agent through the social relay."""

from __future__ import annotations

import click

from automaton_min.cli.common import emit_json, emit_rows, home_of, json_errors, load_config_for


@click.command("send")
@click.argument("to")
@click.argument("message", nargs=-1, required=True)
@click.option("--reply-to", "reply_to", default=None, help="Id of the message this answers.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def command(ctx: click.Context, to: str, message: tuple[str, ...], reply_to: str | None, as_json: bool) -> None:
    """Send MESSAGE to the 0x address TO, signed with this agent's wallet (EIP-191), through socialRelayUrl."""
    from automaton_min.social.outbox import send_from_home

    with json_errors(as_json):
        sent = send_from_home(home_of(ctx), load_config_for(ctx), to, " ".join(message), reply_to)
    if as_json:
        emit_json(sent)
        return
    click.echo("Message sent (signed).")
    emit_rows([("id", sent["id"]), ("from", sent["from"]), ("to", sent["to"]), ("relay", sent["relay"])])

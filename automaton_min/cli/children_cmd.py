"""``automaton-min children``: the agent's children and the steps of their lives, from state.db (read-only)."""

from __future__ import annotations

import click

from automaton_min.cli.common import emit_json, home_of, load_config_for
from automaton_min.config import db_path
from automaton_min.log import printable
from automaton_min.store.db import open_database


@click.command("children")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: each child with its lifecycle steps.")
@click.pass_context
def command(ctx: click.Context, as_json: bool) -> None:
    """List the children this agent spawned: state, wallet, sandbox, credits given, last check (README: Children)."""
    from automaton_min.children.lifecycle import events
    from automaton_min.children.ready import spawn_blocker
    from automaton_min.store.children import list_children
    from automaton_min.update.baked import this_build

    home, config = home_of(ctx), load_config_for(ctx)
    with open_database(db_path(home, config), read_only=True) as db:
        children = [(child, events(db, child.id)) for child in list_children(db)]
    blocker = spawn_blocker(config, this_build())
    if as_json:
        emit_json({"children": [{"id": c.id, "name": c.name, "status": c.status, "address": c.address,
                                 "sandboxId": c.sandbox_id, "fundedCents": c.funded_amount_cents,
                                 "createdAt": c.created_at, "lastChecked": c.last_checked,
                                 "steps": [{"from": f, "to": t, "reason": r} for f, t, r in steps]}
                                for c, steps in children], "cannotSpawn": blocker})
        return
    if not children:
        click.echo("No children." + (f" This agent cannot spawn one: {blocker}." if blocker else ""))
    for child, steps in children:
        click.echo(printable(f"{child.name}  {child.status}  id {child.id}  wallet {child.address or '-'}  sandbox "
                             f"{child.sandbox_id or '-'}  given {child.funded_amount_cents} cents  last checked "
                             f"{child.last_checked or 'never'}"))
        if steps:
            click.echo(printable(f"  last step: {steps[-1][1]} ({steps[-1][2] or ''})"))

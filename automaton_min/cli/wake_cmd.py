"""``automaton-min wake [REASON]``: wake the running agent now, with a reason it reads in its wake-up message."""

from __future__ import annotations

import click

from automaton_min.cli.common import emit_json, home_of, load_config_for


@click.command("wake")
@click.argument("reason", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def command(ctx: click.Context, reason: tuple[str, ...], as_json: bool) -> None:
    """Store a wake event and nudge the running agent (SIGUSR1); without one it is read at the next start."""
    from automaton_min.clock import system_now
    from automaton_min.config import db_path
    from automaton_min.runtime.run_lock import nudge_daemon
    from automaton_min.store.wake import OWNER_WAKE_SOURCE, post_wake
    from automaton_min.store.db import open_database

    home = home_of(ctx)
    config = load_config_for(ctx)
    text = " ".join(reason).strip() or "your creator asked you to wake up"
    with open_database(db_path(home, config)) as db:
        event_id = post_wake(db, OWNER_WAKE_SOURCE, text, now_ms=system_now())
    pid = nudge_daemon(home)
    if as_json:
        emit_json({"event": event_id, "reason": text, "pid": pid, "delivered": pid is not None})
    elif pid is None:
        click.echo("The agent is not running; it will read this when it next starts.")
    else:
        click.echo(f"Woke the agent (pid {pid}).")

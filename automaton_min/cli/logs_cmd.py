"""``automaton-min logs``: the agent's turns and tool calls, from state.db (read-only)."""

from __future__ import annotations

import time
from typing import Any

import click
import orjson

from automaton_min.cli.common import home_of, load_config_for
from automaton_min.config import db_path
from automaton_min.runtime.activity import cursor_of, latest_turns, turns_after
from automaton_min.runtime.report import short
from automaton_min.store.db import open_database

FOLLOW_POLL_S = 1.0
MAX_TAIL = 1_000_000_000  # SQLite takes 64-bit integers; a larger --tail was an OverflowError traceback


@click.command("logs")
@click.option("--tail", "-n", type=click.IntRange(min=0, max=MAX_TAIL), default=20, show_default=True, help="How many recent turns to show.")
@click.option("--follow", "-f", is_flag=True, help="Keep watching and show new turns as they are written (Ctrl-C stops).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per turn (with its tool calls) per line.")
@click.pass_context
def command(ctx: click.Context, tail: int, follow: bool, as_json: bool) -> None:
    """Show what the agent did: its turns and their tool calls, newest last."""
    home = home_of(ctx)
    config = load_config_for(ctx)
    show = _print_json if as_json else _print_text
    with open_database(db_path(home, config), read_only=True) as db:
        turns = latest_turns(db, tail)
        for turn in turns:
            show(turn)
        if not turns and not as_json:
            click.echo("No turns yet: the agent has not taken one in this home (start it with: automaton-min run).",
                       err=True)
        if not follow:
            return
        cursor = cursor_of(turns, None) or _newest(db)
        try:
            while True:
                time.sleep(FOLLOW_POLL_S)  # an interactive watcher: a one-second poll of a local file is cheap
                turns = turns_after(db, cursor)
                for turn in turns:
                    show(turn)
                cursor = cursor_of(turns, cursor)
        except KeyboardInterrupt:
            return


def _newest(db) -> tuple[str, str] | None:
    row = db.query_one("SELECT timestamp, id FROM turns ORDER BY timestamp DESC, id DESC LIMIT 1")
    return (row[0], row[1]) if row else None


def _print_json(turn: dict[str, Any]) -> None:
    click.echo(orjson.dumps(turn).decode())


def _print_text(turn: dict[str, Any]) -> None:
    if turn["thinking"]:
        thought = short(turn["thinking"], 100)
    else:
        thought = "(no text)" if turn["toolCalls"] else "(the model answered nothing: no text, no tool call)"
    source = f" <- {turn['inputSource']}" if turn["inputSource"] else ""
    click.echo(f"{turn['timestamp']}  {turn['state']}{source}  {thought}")
    for call in turn["toolCalls"]:
        arguments = short(orjson.dumps(call["arguments"]).decode(), 80)
        if call["error"] is not None:
            outcome = "error: " + short(call["error"], 100)
        else:
            outcome = "ok" + (f": {short(call['result'], 100)}" if call.get("result") else "")
        click.echo(f"    {call['name']} {arguments}  {outcome}  {call['durationMs']} ms")

"""``automaton-min logs``: the agent's turns, their tool calls and how each turn ended, from state.db (read-only).
Every line passes ``printable``: the model's text never reaches the terminal as escape codes."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

import click
import orjson

from automaton_min.cli.common import home_of, load_config_for, with_home
from automaton_min.config import db_path
from automaton_min.runtime.activity import cursor_of, latest_turns, turns_after
from automaton_min.log import printable, short
from automaton_min.runtime.run_lock import run_holder
from automaton_min.store.db import open_database
from automaton_min.goals.events import events_since
from automaton_min.store.modifications import since

if TYPE_CHECKING:
    from automaton_min.home import Home
    from automaton_min.store.db import Database

FOLLOW_POLL_S = 1.0
MAX_CHANGES = 1000  # the modifications table keeps no more
MAX_TAIL = 1_000_000_000  # SQLite takes 64-bit integers; a larger --tail was an OverflowError traceback


@click.command("logs")
@click.option("--tail", "-n", type=click.IntRange(min=0, max=MAX_TAIL), default=20, show_default=True,
              help="How many recent turns to show.")
@click.option("--follow", "-f", is_flag=True,
              help="Keep watching and show new turns as they are written (Ctrl-C stops).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per turn (with its tool calls) per line.")
@click.pass_context
def command(ctx: click.Context, tail: int, follow: bool, as_json: bool) -> None:
    """Show what the agent did: its turns, their tool calls and how each turn ended (failed ones too), newest
    last."""
    home = home_of(ctx)
    config = load_config_for(ctx)
    show = _print_json if as_json else _print_text
    with open_database(db_path(home, config), read_only=True) as db:
        try:
            _show(db, home, tail, follow, show, as_json)
        except KeyboardInterrupt:  # Ctrl-C ends --follow quietly, also before its first poll
            if not follow:
                raise


def _no_turns_yet(home: "Home") -> str:
    """What an empty history means: the agent is running and has not finished a turn yet, or it was never run."""
    running, pid = run_holder(home)  # the run lock, tested as status does
    if running:
        who = f" (pid {pid})" if pid else ""
        return f"No turns yet: the agent is running{who} and has taken no turn yet."
    return "No turns yet: the agent has not taken one in this home (start it with: automaton-min run)."


def _show(db: "Database", home: "Home", tail: int, follow: bool, show: Callable[[dict[str, Any]], None],
          as_json: bool) -> None:
    """The last ``tail`` turns (in text, with the changes to the agent itself made meanwhile: updates, refusals,
    rollbacks; and what happened to its goals and tasks), then (with ``follow``) each new turn as it is written,
    until interrupted."""
    turns = latest_turns(db, tail + 1)  # one more: are these all the turns there are?
    older, turns = turns[:-tail] if tail else turns, turns[-tail:] if tail else []
    # every change in the span the turns cover; when they are all the turns there are, every change before them too
    start = turns[0]["timestamp"] if turns and older else None
    changes = [] if as_json or not tail else since(db, start, MAX_CHANGES) + events_since(db, start, MAX_CHANGES)
    for at, item in sorted([(turn["timestamp"], turn) for turn in turns] + [(c["at"], c) for c in changes],
                           key=lambda pair: pair[0]):
        if "type" in item:
            click.echo(printable(f"{at}  {item['type'].replace('_', ' ')}: {short(item['description'], 160)}"))
        else:
            show(item)
    if not turns and not as_json:
        click.echo(with_home(_no_turns_yet(home), click.get_current_context()), err=True)
    if not follow:
        return
    cursor = cursor_of(turns, None) or cursor_of(latest_turns(db, 1), None)
    while True:
        time.sleep(FOLLOW_POLL_S)  # an interactive watcher: a one-second poll of a local file is cheap
        turns = turns_after(db, cursor)
        for turn in turns:
            show(turn)
        cursor = cursor_of(turns, cursor)


def _print_json(turn: dict[str, Any]) -> None:
    click.echo(printable(orjson.dumps(turn).decode()))


def ending_text(ending: dict[str, Any]) -> str:
    """How a turn ended, in words: slept, idle, refused, failed (with the error), or went on."""
    ended, reason = ending.get("ended"), short(str(ending.get("reason") or ""), 100)
    slept = f"slept {ending['seconds']} s" if ending.get("seconds") else ""
    if ended == "slept":
        return f"{slept}: {reason}" if reason else slept
    if ended in ("idle", "refused"):
        words = "idle" if ended == "idle" else "refused: no inference allowed"
        return f"{words} ({reason}); {slept}" if slept else f"{words} ({reason})"
    if ended == "failed":
        error = "failed: " + short(str(ending.get("error") or "unknown error"), 200)
        return f"{error}; then {slept}: {reason}" if slept else error
    if ended == "warned":
        return f"went on, warned: {reason}"
    if ended == "stopped":
        return f"stopped: {reason}" if reason else "stopped"
    return "went on to the next turn" if ended == "went on" else str(ended)


def _print_text(turn: dict[str, Any]) -> None:
    if turn.get("failed"):
        thought = "(the turn failed: nothing of it was kept)"
    elif turn["thinking"]:
        thought = short(turn["thinking"], 100)
    else:
        thought = "(no text)" if turn["toolCalls"] else "(the model answered nothing: no text, no tool call)"
    source = f" <- {turn['inputSource']}" if turn["inputSource"] else ""
    click.echo(printable(f"{turn['timestamp']}  {turn['state']}{source}  {thought}"))
    for call in turn["toolCalls"]:
        arguments = short(orjson.dumps(call["arguments"]).decode(), 80)
        if call["error"] is not None:
            outcome = "error: " + short(call["error"], 100)
        else:
            outcome = "ok" + (f": {short(call['result'], 100)}" if call.get("result") else "")
        click.echo(printable(f"    {call['name']} {arguments}  {outcome}  {call['durationMs']} ms"))
    if turn.get("ending"):
        click.echo(printable(f"    ended: {ending_text(turn['ending'])}"))

"""``automaton-min heartbeat``: list the schedule, run a task now, enable or disable one."""

from __future__ import annotations

import click

from automaton_min.cli.common import emit_json, home_of, load_config_for
from automaton_min.log import printable


def _open(ctx: click.Context):
    from automaton_min.config import db_path
    from automaton_min.heartbeat.control import ensure_schedule
    from automaton_min.store.db import open_database
    from automaton_min.clock import system_now

    home = home_of(ctx)
    config = load_config_for(ctx)
    db = open_database(db_path(home, config), quick_check=False)
    ensure_schedule(db, home, config, system_now())
    return home, config, db


@click.group("heartbeat")
def command() -> None:
    """The heartbeat's schedule: tasks that run while the agent sleeps."""


@command.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of the rows.")
@click.pass_context
def list_tasks(ctx: click.Context, as_json: bool) -> None:
    """Every task: cron, enabled, lowest tier, last run and result, next run."""
    from automaton_min.clock import system_now, to_iso
    from automaton_min.cron import CronError, next_after, timezone_named
    from automaton_min.heartbeat.schedule import read_schedule

    _, config, db = _open(ctx)
    with db:
        rows = read_schedule(db)
    tz = timezone_named(config.get("heartbeatTimezone"))
    now_ms = system_now()
    listed = []
    for row in rows:
        data = row.as_json()
        if row.next_run_at is None and row.enabled:
            try:
                data["nextRunAt"] = to_iso(now_ms if row.last_run_at is None else
                                           next_after(row.cron_expression, min(row.last_run_at, now_ms), tz))
            except CronError:
                data["nextRunAt"] = None
        listed.append(data)
    if as_json:
        emit_json(listed)
        return
    for d in listed:
        state = "on " if d["enabled"] else "off"
        last = f"{d['lastResult']} at {d['lastRunAt']}" if d["lastRunAt"] else "never run"
        nxt = d["nextRunAt"] if d["enabled"] else "-"
        click.echo(f"{d['name']:<20} {state} {d['cron']:<16} tier>={d['tierMinimum']:<11} last: {last}; next: {nxt}")


@command.command("run")
@click.argument("name")
@click.pass_context
def run_task(ctx: click.Context, name: str) -> None:
    """Run NAME now: the running daemon is asked to; with none, it runs here."""
    from automaton_min.heartbeat.control import HeartbeatControl
    from automaton_min.runtime.run_lock import run_holder
    from automaton_min.runtime.run_lock import nudge_daemon

    home, config, db = _open(ctx)
    with db:
        control = HeartbeatControl(db)
        control.row(name)
        running, _ = run_holder(home)
        if running:
            control.request_run(name)
            pid = nudge_daemon(home)
            if pid is not None:
                click.echo(f"asked the running agent (pid {pid}) to run {name}")
                return
        _run_here(home, config, db, name)


def _run_here(home, config, db, name: str) -> None:
    from automaton_min.errors import RuntimeFailure
    from automaton_min.heartbeat.context import ContextFactory
    from automaton_min.heartbeat.scheduler import Scheduler
    from automaton_min.heartbeat.tasks import BUILTIN_TASKS

    wallet = relay = None
    if home.wallet_path.exists():
        from automaton_min.chain.wallet import load_wallet
        from automaton_min.social.relay import RelayClient

        wallet = load_wallet(home.wallet_path, config.get("walletAddress"))
        relay = RelayClient.from_config(config, wallet)  # heartbeat_ping's distress reaches the creator by hand too
    from automaton_min.heartbeat.update_task import update_task
    from automaton_min.update.baked import this_build

    from automaton_min.heartbeat.children_task import children_tasks

    factory = ContextFactory(home, config, wallet=wallet, relay=relay)
    by_hand = {"check_for_updates": update_task(this_build(), may_apply=False),  # reports; `update` applies
               **children_tasks(this_build())}
    scheduler = Scheduler(home, config, db.path, BUILTIN_TASKS, factory, None, extra_tasks=by_hand)
    ran = scheduler.run_task(db, name)
    if ran.result != "success":
        raise RuntimeFailure(f"{name}: {ran.result}: {ran.error}")
    click.echo(printable(f"ran {name}: {ran.summary or 'ok'}"
                         + (f" (the agent will be woken: {ran.wake})" if ran.wake else "")))


def _toggle(ctx: click.Context, name: str, enabled: bool) -> None:
    from automaton_min.heartbeat.control import HeartbeatControl
    from automaton_min.runtime.run_lock import nudge_daemon

    home, _, db = _open(ctx)
    with db:
        HeartbeatControl(db).set_enabled(name, enabled)
    nudge_daemon(home)  # a running daemon re-reads its schedule
    click.echo(f"{name} {'enabled' if enabled else 'disabled'}")


@command.command("enable")
@click.argument("name")
@click.pass_context
def enable(ctx: click.Context, name: str) -> None:
    """Let NAME run on its schedule."""
    _toggle(ctx, name, True)


@command.command("disable")
@click.argument("name")
@click.pass_context
def disable(ctx: click.Context, name: str) -> None:
    """Stop NAME from running (its history is kept)."""
    _toggle(ctx, name, False)

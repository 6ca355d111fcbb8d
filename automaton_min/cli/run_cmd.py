"""``automaton-min run``: the agent itself (the systemd service runs this)."""

from __future__ import annotations

import sys

import click

from automaton_min.cli.common import home_of
from automaton_min.config import load_config
from automaton_min.observe.log import configure_logging


@click.command("run")
@click.pass_context
def command(ctx: click.Context) -> None:
    """Run the agent: wake cycles, and event-driven sleep between them, until SIGTERM or SIGINT.

    One run per home: a second one exits 2 naming the pid of the first.
    """
    from automaton_min.runtime.agent_runtime import build_agent
    from automaton_min.runtime.daemon import Signals, serve
    from automaton_min.runtime.report import log_banner
    from automaton_min.runtime.run_lock import RunLock

    home = home_of(ctx)
    home.require()
    config = load_config(home)
    configure_logging(ctx.find_root().obj.get("log_level") or config.get("logLevel", "info"), sys.stdout)
    lock = RunLock(home)
    lock.acquire()
    try:
        signals = Signals()
        signals.install()
        agent = build_agent(home, config)
        log_banner(agent, config)
        code = serve(agent.loop, signals, agent.sleep_until, on_stop=agent.close)
    finally:
        lock.release()
    ctx.exit(code)

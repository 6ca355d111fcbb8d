"""``automaton-min run``: the agent itself (the systemd service runs this)."""

from __future__ import annotations

import sys

import click

from automaton_min.cli.common import home_of
from automaton_min.config import load_config
from automaton_min.errors import EXIT_FAILURE, AutomatonError
from automaton_min.log import configure_logging, get_logger

log = get_logger("run")

@click.command("run")
@click.pass_context
def command(ctx: click.Context) -> None:
    """Run the agent: wake cycles, the heartbeat, and event-driven sleep, until SIGTERM or SIGINT.

    One run per home: a second one exits 2 naming the pid of the first. On a terminal, a home that is not set up
    yet starts the setup wizard first.
    """
    from automaton_min.update.baked import this_build
    from automaton_min.update.settle import on_trial

    if on_trial(this_build()):  # a new binary that cannot start exits 1, never 2: the unit rolls it back, restarts
        try:
            _run(ctx)
        except AutomatonError as exc:
            log.error("the new version failed to start", extra={"error": str(exc)})
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(EXIT_FAILURE)
        return
    _run(ctx)


def _run(ctx: click.Context) -> None:
    from automaton_min.config import db_path
    from automaton_min.runtime.run_lock import RunLock
    from automaton_min.runtime.service import run_service
    from automaton_min.runtime.writable import require_writable

    home = home_of(ctx)
    if not home.config_path.exists() and sys.stdin.isatty() and sys.stdout.isatty():
        from automaton_min.cli.setup_cmd import command as setup

        click.echo("This home is not set up yet; the setup wizard comes first.")
        ctx.invoke(setup)
    home.require()
    config = load_config(home)
    configure_logging(ctx.find_root().obj.get("log_level") or config.get("logLevel", "info"), sys.stdout)
    log.debug("start-up step done", extra={"step": "config"})
    require_writable(home, db_path(home, config))
    lock = RunLock(home)
    lock.acquire()
    try:
        code = run_service(home, config)
    except AutomatonError:
        raise  # one line and its exit code (cli/main.py)
    except Exception:  # the service's outer boundary: a fatal error is logged whole, and the exit code says so
        log.exception("fatal error; the agent stopped")
        code = EXIT_FAILURE
    finally:
        lock.release()
    ctx.exit(code)

"""The ``automaton-min`` entry point: the command group, global options and error rendering."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import apsw
import click

from automaton_min import __version__
from automaton_min.cli.common import with_home
from automaton_min.errors import EXIT_FAILURE, AutomatonError
from automaton_min.home import Home, default_home
from automaton_min.log import LOG_LEVEL_NAMES, configure_logging, printable


class CommandFailed(click.ClickException):
    """One line on stderr (``Error: ...``) and the exit code the error carries."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(printable(message))  # it may quote a server's answer: never escape codes on the terminal
        self.exit_code = exit_code


# Command name -> module defining ``command``; a module is imported only when its command runs.
COMMANDS = {
    "init": "automaton_min.cli.init_cmd",
    "setup": "automaton_min.cli.setup_cmd",
    "config": "automaton_min.cli.config_cmd",
    "status": "automaton_min.cli.status_cmd",
    "logs": "automaton_min.cli.logs_cmd",
    "doctor": "automaton_min.cli.doctor_cmd",
    "wallet": "automaton_min.cli.wallet_cmd",
    "provision": "automaton_min.cli.provision_cmd",
    "topup": "automaton_min.cli.topup_cmd",
    "fund": "automaton_min.cli.fund_cmd",
    "run": "automaton_min.cli.run_cmd",
    "wake": "automaton_min.cli.wake_cmd",
    "heartbeat": "automaton_min.cli.heartbeat_cmd",
    "send": "automaton_min.cli.send_cmd",
    "service": "automaton_min.cli.service_cmd",
    "update": "automaton_min.cli.update_cmd",
    "children": "automaton_min.cli.children_cmd",
    "goals": "automaton_min.cli.goals_cmd",
}


class AutomatonGroup(click.Group):
    """Loads commands lazily and turns this project's errors (and I/O failures) into one line and an exit code."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = COMMANDS.get(name)
        return importlib.import_module(module).command if module else None

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # An argument that is not UTF-8 (a stray byte on the command line) reaches Python as a lone surrogate,
        # which fails later wherever it is written (JSON, SQLite, stderr): refuse it here, once, for every command.
        for position, arg in enumerate(args, start=1):
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                raise click.UsageError(f"argument {position} is not valid UTF-8 text", ctx) from None
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AutomatonError as exc:
            raise CommandFailed(with_home(str(exc), ctx), exc.exit_code) from None
        except apsw.Error as exc:
            raise CommandFailed(with_home(f"database error: {exc}; run: automaton-min doctor", ctx),
                                EXIT_FAILURE) from None
        except BrokenPipeError:
            raise  # the reader went away (``status | head -1``): main() ends quietly
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            raise CommandFailed(f"{exc.strerror or exc}{where}", EXIT_FAILURE) from None


@click.group(cls=AutomatonGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="automaton-min", message="%(prog)s %(version)s")
@click.option(
    "--home",
    type=click.Path(path_type=Path),
    envvar="AUTOMATON_HOME",
    help="Home directory of the automaton (default ~/.automaton; env AUTOMATON_HOME).",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVEL_NAMES, case_sensitive=False),
    help="Override the config's logLevel for this command.",
)
@click.pass_context
def cli(ctx: click.Context, home: Path | None, log_level: str | None) -> None:
    """automaton-min: a small, self-funding AI agent for small devices."""
    ctx.obj = {"home": Home((home or default_home()).expanduser().absolute()), "log_level": log_level}
    configure_logging(log_level or "info", sys.stderr)


def main() -> None:
    """Console-script entry point (a one-file binary's own spawner starts before it: build/automaton-min.spec)."""
    try:
        cli(prog_name="automaton-min")
    except BrokenPipeError:
        _quiet_broken_pipe()


def _quiet_broken_pipe() -> None:
    """Exit without a message after the reader of stdout closed it; no flush at exit may fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(EXIT_FAILURE)

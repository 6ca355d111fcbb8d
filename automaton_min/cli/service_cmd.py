"""``automaton-min service install`` / ``service uninstall``: the agent as a hardened systemd service.

The work is in ``runtime/install.py``; this module chooses the home, prints the steps and what to run next.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import click
from click.core import ParameterSource

from automaton_min.cli.common import home_of

_ROOT_HELP = "Prefix every system path with DIR (tests)."


def _source_home(ctx: click.Context) -> tuple[Path, str]:
    """The home to install and how it was chosen: under ``sudo``, with no ``--home`` or ``AUTOMATON_HOME``,
    ``$SUDO_USER``'s ``~/.automaton``, not root's."""
    root_ctx = ctx.find_root()
    home = home_of(ctx).root
    sudo_user = os.environ.get("SUDO_USER")
    if (root_ctx.get_parameter_source("home") in (None, ParameterSource.DEFAULT) and sudo_user
            and sudo_user != "root" and os.geteuid() == 0):
        try:
            return Path(pwd.getpwnam(sudo_user).pw_dir) / ".automaton", f" (the home of {sudo_user}, who ran sudo)"
        except KeyError:
            pass
    return home, ""


def _print_steps(plan, dry_run: bool, heading: str) -> None:
    width = max((len(step.what) for step in plan.steps), default=0)
    if dry_run:
        click.echo(f"Dry run, nothing was changed. {heading} would:")
        for step in plan.steps:
            click.echo(f"  {step.what:<{width}}  {step.detail}")
    for note in plan.notes:
        click.echo(f"Note: {note}")
    for need in plan.before:
        click.echo(f"Before a real install: {need}")


@click.group("service")
def command() -> None:
    """Run the agent as a hardened systemd service (install or uninstall the unit)."""


@command.command("install")
@click.option("--copy", "copy", is_flag=True, help="Copy the home into the state directory instead of moving it.")
@click.option("--binary", metavar="PATH",
              help="The executable for ExecStart= (default: this binary, or automaton-min on PATH).")
@click.option("--dry-run", is_flag=True, help="Print every step and change nothing.")
@click.option("--root", "root", type=click.Path(file_okay=False, path_type=Path), default=Path("/"), hidden=True,
              help=_ROOT_HELP)
@click.option("--no-user", is_flag=True, hidden=True, help="Neither create the user nor chown (tests).")
@click.pass_context
def install(ctx: click.Context, copy: bool, binary: str | None, dry_run: bool, root: Path, no_user: bool) -> None:
    """Install the agent as the systemd service automaton-min.

    Creates the system user automaton (home /var/lib/automaton, no login shell) if missing, moves the home
    (--home, default ~/.automaton; --copy to copy it) to /var/lib/automaton, owned by that user with wallet.json
    0600, and writes /etc/systemd/system/automaton-min.service. It does not start anything: it prints the
    systemctl commands to run. Needs root.
    """
    from automaton_min.runtime import install as inst

    source, why = _source_home(ctx)
    plan = inst.plan_install(source.expanduser().absolute(), root=root.absolute(), copy=copy, binary=binary,
                             manage_user=not no_user, dry_run=dry_run)
    click.echo(f"Home: {source}{why}")
    _print_steps(plan, dry_run, "service install")
    if dry_run:
        click.echo(f"Then, as root: {inst.START_COMMANDS}")
        return
    width = max(len(step.what) for step in plan.steps)
    inst.apply(plan, lambda step: click.echo(f"  {step.what:<{width}}  {step.detail}"))
    click.echo("Installed. Start it, as root:")
    click.echo(f"  {inst.START_COMMANDS}")
    click.echo(f"Its log: journalctl -u {inst.SERVICE} (the start banner names the confinement: landlock)")
    click.echo(f"Commands on its home: {inst.OWNER_COMMAND} status (or wake, logs, doctor, ...)")


@command.command("uninstall")
@click.option("--dry-run", is_flag=True, help="Print every step and change nothing.")
@click.option("--root", "root", type=click.Path(file_okay=False, path_type=Path), default=Path("/"), hidden=True,
              help=_ROOT_HELP)
def uninstall(dry_run: bool, root: Path) -> None:
    """Remove the unit file (and its enablement links). Stops nothing; the state directory and the user stay."""
    from automaton_min.runtime import install as inst

    plan = inst.plan_uninstall(root=root.absolute(), dry_run=dry_run)
    _print_steps(plan, dry_run, "service uninstall")
    if not dry_run:
        width = max(len(step.what) for step in plan.steps)
        inst.apply(plan, lambda step: click.echo(f"  {step.what:<{width}}  {step.detail}"))
    click.echo(f"{'Then' if dry_run else 'Next'}, as root: {inst.STOP_COMMANDS}")
    click.echo(f"Kept: the state directory {inst.STATE_DIR} (wallet, database) and the user {inst.USER}. "
               f"To run the agent by hand: {inst.OWNER_COMMAND} run")

"""``automaton-min update [--check] [--rollback]``: the one-file binary updates itself from a signed release."""

from __future__ import annotations

import click

from automaton_min.cli.common import emit_json, home_of, load_config_for, with_home
from automaton_min.errors import UserError
from automaton_min.log import printable

RESTART = "restart the agent (under the unit: sudo systemctl restart automaton-min)"


@click.command("update")
@click.option("--check", is_flag=True, help="Only say whether a newer release is available.")
@click.option("--rollback", is_flag=True, help="Put the previous binary back.")
@click.option("--manifest-url", default=None, help="Read the release manifest here (default: updateManifestUrl).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def command(ctx: click.Context, check: bool, rollback: bool, manifest_url: str | None, as_json: bool) -> None:
    """Fetch the release manifest, verify its signature with the key built into this binary, download the build for
    this machine, check its size and sha256, run it once, and swap it in, keeping the previous binary.

    Exit 0 when up to date, available (--check), applied or already applied and waiting for a restart; 1 when a
    release was refused or not reachable.
    """
    from automaton_min.clock import system_now
    from automaton_min.config import db_path
    from automaton_min.store.db import open_database
    from automaton_min.update.baked import this_build
    from automaton_min.update.updater import Updater

    build = this_build()
    if build.binary is None:
        raise UserError("this is a source or pip install, not the one-file binary: update it with pip or git")
    home = home_of(ctx)
    config = load_config_for(ctx)
    with open_database(db_path(home, config)) as db:
        if rollback:
            click.echo(_rollback(db, build, system_now()))
            return
        url = manifest_url or config.get("updateManifestUrl") or build.manifest_url
        if not url:
            raise UserError("no release manifest URL: set one with automaton-min config set updateManifestUrl URL")
        outcome = Updater(db, build, url, now=system_now).run(apply=not check)
    if as_json:
        emit_json({"state": outcome.state, "detail": outcome.detail, "version": outcome.version,
                   "running": build.version})
    elif outcome.state == "applied":
        click.echo(f"Updated {outcome.detail}; the previous binary is kept. To run the new one, {RESTART}.")
    elif outcome.state == "available":
        click.echo(with_home(f"Version {outcome.version} is available (running {build.version}); run: "
                             "automaton-min update", ctx))
    elif outcome.state == "latest":
        click.echo(f"Up to date: {outcome.detail}.")
    elif outcome.state == "pending":
        click.echo(f"Nothing to do: {outcome.detail}; {RESTART}.")
    else:  # the detail may quote a release server's answer
        what = "Update check failed" if check else "Not updated"
        click.echo(printable(f"{what} ({outcome.state}): {outcome.detail}"), err=True)
        ctx.exit(1)


def _rollback(db, build, now_ms: int) -> str:
    from automaton_min.update.manifest import Refused
    from automaton_min.update.updater import roll_back_by_hand

    try:
        roll_back_by_hand(db, build, now_ms)
    except Refused as exc:
        raise UserError(str(exc)) from None
    return f"The previous binary is back in {build.binary}; to run it, {RESTART}."

"""``automaton-min doctor``: health checks with fixes; non-zero exit on any failure."""

from __future__ import annotations

import click

from automaton_min.cli.common import emit_json, home_of, with_home
from automaton_min.errors import EXIT_FAILURE
from automaton_min.runtime.doctor import all_passed, run_doctor


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def command(ctx: click.Context, as_json: bool) -> None:
    """Check the home directory, file permissions, the config and the database's integrity."""
    checks = run_doctor(home_of(ctx))
    for check in checks:
        check.fix = with_home(check.fix, ctx)
    passed = all_passed(checks)
    if as_json:
        emit_json({"ok": passed, "checks": [check.as_dict() for check in checks]})
    else:
        for check in checks:
            line = f"{'ok  ' if check.ok else 'FAIL'}  {check.name:<18} {check.detail}"
            click.echo(line + (f"\n      fix: {check.fix}" if check.fix and not check.ok else ""))
        click.echo("all checks passed" if passed else "some checks failed")
    if not passed:
        ctx.exit(EXIT_FAILURE)

"""``automaton-min doctor``: health checks with fixes; non-zero exit on any failure (a part that is off, or a remote
part the agent found unreachable, is none)."""

from __future__ import annotations

import click

from automaton_min.cli.common import emit_json, home_of, with_home
from automaton_min.errors import EXIT_FAILURE
from automaton_min.runtime.doctor import all_passed, run_doctor

LABELS = {"ok": "ok  ", "fail": "FAIL", "off": "off ", "skip": "skip", "unreachable": "down"}
HINTS = {"fail": "fix: ", "off": "to turn it on: ", "skip": "to try it: ", "unreachable": ""}


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--try-model", is_flag=True,
              help="Send the tiny test request to a model endpoint that may charge for it.")
@click.pass_context
def command(ctx: click.Context, as_json: bool, try_model: bool) -> None:
    """Check the home directory, file permissions, the config, the database's integrity and the model."""
    checks = run_doctor(home_of(ctx), try_model=try_model)
    for check in checks:
        check.fix = with_home(check.fix, ctx)
    passed = all_passed(checks)
    if as_json:
        emit_json({"ok": passed, "checks": [check.as_dict() for check in checks]})
    else:
        for check in checks:
            line = f"{LABELS[check.state]}  {check.name:<18} {check.detail}"
            click.echo(line + (f"\n      {HINTS[check.state]}{check.fix}"
                               if check.fix and check.state in HINTS else ""))
        down = ", ".join(check.name for check in checks if check.state == "unreachable")
        failed = ", ".join(check.name for check in checks if check.state == "fail")
        click.echo(("all checks passed" if passed else f"failed: {failed}" if failed else "some checks failed")
                   + (f"; not answering when the agent last tried: {down} (it runs without them)" if down else ""))
    if not passed:
        ctx.exit(EXIT_FAILURE)

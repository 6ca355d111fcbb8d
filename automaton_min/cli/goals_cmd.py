"""``automaton-min goals``: the agent's goals and the active one's tasks; ``goals cancel ID``: the owner ends one."""

from __future__ import annotations

import click

from automaton_min.cli.common import emit_json, home_of, load_config_for
from automaton_min.config import db_path
from automaton_min.log import printable
from automaton_min.store.db import open_database

OWNER = "owner"  # the actor the goals' events name for what the owner did from this command


@click.group("goals", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: each goal with its tasks.")
@click.pass_context
def command(ctx: click.Context, as_json: bool) -> None:
    """List the goals, newest first, with the active goal's checklist (README: Goals)."""
    if ctx.invoked_subcommand is not None:
        return
    from automaton_min.goals.todo import plan_lines
    from automaton_min.store.goals import goals, tasks_of
    from automaton_min.store.sqlite import table_exists

    home, config = home_of(ctx), load_config_for(ctx)
    with open_database(db_path(home, config), read_only=True) as db:
        listed = [(goal, tasks_of(db, goal.id)) for goal in goals(db, limit=20)] if table_exists(db, "goals") else []
        active = [plan_lines(db, goal) for goal, _ in listed if goal.status == "active"]
    if as_json:
        emit_json({"goals": [{"id": g.id, "title": g.title, "status": g.status, "createdAt": g.created_at,
                              "completedAt": g.completed_at,
                              "tasks": [{"id": t.id, "title": t.title, "status": t.status, "assignedTo": t.assigned_to,
                                         "dependencies": list(t.dependencies), "result": t.result} for t in tasks]}
                             for g, tasks in listed]})
        return
    if not listed:
        click.echo("No goals.")
    for line in (line for lines in active for line in lines):
        click.echo(printable(line))
    for goal, tasks in listed:
        if goal.status != "active":
            done = sum(task.status == "completed" for task in tasks)
            click.echo(printable(f"{goal.title}  {goal.status}  {done} of {len(tasks)} tasks done  id {goal.id}  "
                                 f"created {goal.created_at}"))


@command.command("cancel")
@click.argument("goal_id")
@click.option("--reason", default="cancelled by the owner", show_default=True, help="Recorded with the goal's end.")
@click.pass_context
def cancel(ctx: click.Context, goal_id: str, reason: str) -> None:
    """End an active or paused goal: it fails and its open tasks are cancelled (the running agent sees it next
    turn)."""
    from automaton_min.clock import system_now
    from automaton_min.errors import UserError
    from automaton_min.goals.board import cancel_goal
    from automaton_min.store.goals import get_goal

    home, config = home_of(ctx), load_config_for(ctx)
    with open_database(db_path(home, config)) as db:
        if get_goal(db, goal_id.strip()) is None:
            raise UserError(f"no goal {goal_id.strip()!r}; automaton-min goals lists them with their ids")
        goal = cancel_goal(db, goal_id.strip(), reason, actor=OWNER, now_ms=system_now())
    click.echo(printable(f"Goal {goal.title!r} cancelled; its open tasks were cancelled."))

"""``automaton-min goals``: the agent's goals and the active one's tasks; ``goals add``: the owner sets one (with the
creator's authority, as ``fund`` acts); ``goals cancel ID``: the owner ends one."""

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
    from automaton_min.goals.events import recent_events
    from automaton_min.goals.todo import plan_lines
    from automaton_min.store.goals import goal_origin_of, goals, tasks_of
    from automaton_min.store.sqlite import table_exists

    home, config = home_of(ctx), load_config_for(ctx)
    with open_database(db_path(home, config), read_only=True) as db:
        found = goals(db, limit=20) if table_exists(db, "goals") else []
        listed = [(goal, tasks_of(db, goal.id), goal_origin_of(db, goal_id=goal.id),
                   next(iter(recent_events(db, limit=1, goal_id=goal.id, leave_out=("task_report_refused",))), None))
                  for goal in found]
        active = [plan_lines(db, goal) for goal in found if goal.status == "active"]
    if as_json:
        emit_json({"goals": [{"id": g.id, "title": g.title, "status": g.status, "setBy": origin,
                              "createdAt": g.created_at, "completedAt": g.completed_at,
                              "lastEvent": last.content if last else None,
                              "tasks": [{"id": t.id, "title": t.title, "status": t.status, "assignedTo": t.assigned_to,
                                         "dependencies": list(t.dependencies), "result": t.result} for t in tasks]}
                             for g, tasks, origin, last in listed]})
        return
    if not listed:
        click.echo("No goals. The agent sets its own with create_goal; give it one with: automaton-min goals add "
                   "TITLE --task TASK ...")
    for line in (line for lines in active for line in lines):
        click.echo(printable(line))
    for goal, tasks, origin, last in listed:
        if goal.status != "active":
            done = sum(task.status == "completed" for task in tasks)
            click.echo(printable(f"{goal.title}  {goal.status}  {done} of {len(tasks)} tasks done  set by {origin}  "
                                 f"id {goal.id}  created {goal.created_at}"))
            if last:
                click.echo(printable(f"  {last.content}"))


@command.command("add")
@click.argument("title")
@click.option("--task", "tasks", multiple=True, required=True, metavar="TITLE",
              help="A task of the goal; repeat it, in order: each task waits for the one before it.")
@click.option("--description", help="Why, and what done looks like.")
@click.pass_context
def add(ctx: click.Context, title: str, tasks: tuple[str, ...], description: str | None) -> None:
    """Give the agent a goal with its tasks, as its creator: it becomes the active goal and the agent is woken to
    work on it (one goal at a time: cancel the active one first)."""
    from automaton_min.clock import system_now
    from automaton_min.errors import UserError
    from automaton_min.goals.board import Blocked, create_goal
    from automaton_min.goals.plan import check_plan
    from automaton_min.runtime.run_lock import nudge_daemon
    from automaton_min.store.wake import OWNER_WAKE_SOURCE, post_wake

    plan = check_plan([{"title": task, "depends_on": [n] if n else []} for n, task in enumerate(tasks)])
    home, config = home_of(ctx), load_config_for(ctx)
    with open_database(db_path(home, config)) as db:
        try:
            goal = create_goal(db, title, description, actor=OWNER, now_ms=system_now(), origin="creator", plan=plan)
        except Blocked as exc:
            raise UserError(f"{str(exc).split(';')[0]}; end it first with: automaton-min goals cancel ID") from None
        post_wake(db, OWNER_WAKE_SOURCE, f"your creator set you a goal: {title}", now_ms=system_now())
    pid = nudge_daemon(home)
    woken = f"woke the agent (pid {pid})" if pid else "the agent reads it when it next starts"
    click.echo(printable(f"Goal {goal.title!r} set with {len(plan)} tasks (id {goal.id}); {woken}."))


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

"""``check_child_health`` and ``prune_dead_children`` (README: Children): the spawns and fundings a killed parent
left half done are carried on, every running child is looked at and restarted when it stopped, the gauge
``unhealthy_child_count`` feeds the alert, and dead children beyond the newest five are cleaned up."""

from __future__ import annotations

from typing import TYPE_CHECKING

from automaton_min.config import relay_url
from automaton_min.heartbeat.task_api import TaskContext, TaskFunction, TaskResult

if TYPE_CHECKING:
    from automaton_min.update.baked import Build

KEEP_DEAD = 5


def children_tasks(build: "Build") -> dict[str, TaskFunction]:
    """The two tasks, for this build (a spawn left half done gets its binary from this build's release)."""

    def check_child_health(ctx: TaskContext) -> TaskResult:
        from automaton_min.children.funding import finish_interrupted
        from automaton_min.children.running import WATCHED, tend
        from automaton_min.conway.client import DEFAULT_API_URL, ConwayError
        from automaton_min.store.children import FUNDABLE, list_children
        from automaton_min.treasury.money_out import TransferRefused, treasury_policy

        children = list_children(ctx.db)
        if not children:
            return TaskResult("no children")
        if ctx.conway is None:
            return TaskResult("no Conway API key: the children cannot be reached")
        lines = _resume_spawns(ctx, build)
        for child in children:
            if child.status in FUNDABLE:
                try:
                    if finish_interrupted(ctx.db, ctx.conway, treasury_policy(ctx.config), ctx.config, child):
                        lines.append(f"{child.name}: an interrupted funding was completed")
                except ConwayError as exc:
                    lines.append(f"{child.name}: an interrupted funding is still unanswered: {exc}")
                except TransferRefused as exc:
                    lines.append(f"{child.name}: an interrupted funding was dropped: {exc}")
        for child in list_children(ctx.db):
            if child.status in WATCHED:
                lines.append(tend(ctx.db, ctx.conway, child, conway_api_url=ctx.config.get("conwayApiUrl")
                                  or DEFAULT_API_URL, relay_url=relay_url(ctx.config),
                                  now_ms=ctx.now()))
        unhealthy = sum(1 for child in list_children(ctx.db) if child.status == "unhealthy")
        if ctx.metrics is not None:
            ctx.metrics.gauge("unhealthy_child_count", unhealthy)
        return TaskResult("; ".join(lines) or "no child to look at", reached=("conway",))

    def prune_dead_children(ctx: TaskContext) -> TaskResult:
        from automaton_min.children.running import DEAD_GRACE_MS, prune_dead

        cleaned = prune_dead(ctx.db, ctx.conway, keep=KEEP_DEAD, now_ms=ctx.now(), grace_ms=DEAD_GRACE_MS)
        return TaskResult(f"cleaned up {len(cleaned)}" + (f": {', '.join(cleaned)}" if cleaned else ""))

    return {"check_child_health": check_child_health, "prune_dead_children": prune_dead_children}


def _resume_spawns(ctx: TaskContext, build: "Build") -> list[str]:
    """Spawns stopped before a verified wallet, carried on when this build can verify a release."""
    from automaton_min.children.pipeline import IN_PROGRESS, Parent, resume_all
    from automaton_min.children.ready import manifest_url
    from automaton_min.store.children import list_children

    if not any(child.status in IN_PROGRESS for child in list_children(ctx.db)):
        return []
    if build.public_key is None or not manifest_url(ctx.config, build):
        return ["a spawn left half done waits: this build has no release key or manifest URL"]
    return resume_all(Parent.of(ctx.db, ctx.conway, build, ctx.config, address=ctx.wallet_address,
                                constitution=ctx.home.constitution_path, now=ctx.now))

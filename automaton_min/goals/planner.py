"""The planner: a goal turned into a small plan by the model the router picks for task type ``planning`` (README:
Goals). Its answer is checked as any plan is (``goals/plan.py``); a wrong one is sent back with the reason, at most
``MAX_REPLANS`` times. It runs only inside a turn (``create_goal`` without tasks), never while the agent sleeps."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import orjson

from automaton_min.errors import RuntimeFailure
from automaton_min.goals.plan import MAX_TASKS, PlannedTask, PlanRefused, check_plan
from automaton_min.inference.router import BudgetDenied
from automaton_min.inference.types import Message

if TYPE_CHECKING:
    from automaton_min.inference.router import Router

MAX_REPLANS = 3
PLAN_MAX_TOKENS = 1_500
INSTRUCTIONS = (
    "You plan work for an autonomous agent. Break the goal you are given into 2 to "
    f"{MAX_TASKS} small, concrete tasks, each one a step the agent can finish and check. Answer with JSON only, "
    'in this shape: {"tasks": [{"title": "...", "description": "...", "depends_on": [1], "priority": 50}]}. '
    "depends_on lists the numbers (from 1) of the tasks that must be done first; never a task's own number, never "
    "a loop. priority is 0 to 100, higher first."
)
_JSON = re.compile(r"\{.*\}|\[.*\]", re.DOTALL)


def plan_goal(router: "Router", title: str, description: str | None, strategy: str | None, *, tier: str,
              turn_id: str | None) -> list[PlannedTask]:
    """A checked plan, or ``PlanRefused`` saying why the last answer was wrong (after ``MAX_REPLANS`` replans)."""
    asked = f"Goal: {title}" + (f"\nWhat done looks like: {description}" if description else "") + (
        f"\nStrategy: {strategy}" if strategy else "")
    messages = [Message("system", INSTRUCTIONS), Message("user", asked)]
    reason = ""
    for _ in range(1 + MAX_REPLANS):
        answer = _ask(router, tuple(messages), tier=tier, turn_id=turn_id)
        try:
            return check_plan(_tasks_of(answer))
        except PlanRefused as exc:
            reason = str(exc)
        messages += [Message("assistant", answer[:4000]),
                     Message("user", f"That plan is wrong: {reason}. Answer again with JSON only.")]
    raise PlanRefused(f"no usable plan after {MAX_REPLANS} replans ({reason}); give the tasks yourself")


def _ask(router: "Router", messages: tuple[Message, ...], *, tier: str, turn_id: str | None) -> str:
    from dataclasses import replace

    route = router.plan(tier, "planning")
    if isinstance(route, BudgetDenied):
        raise PlanRefused(f"no planning at this tier ({route.message}); give the tasks yourself")
    try:
        routed = router.route(messages, tier=tier, turn_id=turn_id, task_type="planning",
                              planned=replace(route, max_tokens=min(route.max_tokens, PLAN_MAX_TOKENS)))
    except RuntimeFailure as exc:
        raise PlanRefused(f"the planner's model did not answer ({exc}); give the tasks yourself") from None
    if isinstance(routed, BudgetDenied):
        raise PlanRefused(f"no planning now ({routed.message}); give the tasks yourself")
    return routed.result.content or ""


def _tasks_of(answer: str) -> Any:
    found = _JSON.search(answer or "")
    if found is None:
        raise PlanRefused("the answer holds no JSON")
    try:
        data = orjson.loads(found.group(0))
    except orjson.JSONDecodeError as exc:
        raise PlanRefused(f"the JSON does not parse ({exc})") from None
    return data.get("tasks") if isinstance(data, dict) else data

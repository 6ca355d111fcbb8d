"""Authority rule (priority 400): an external turn may not use a dangerous tool, nor one in ``EXTERNAL_DENIED_TOOLS``.

The reference had authority backwards (it trusted other agents' messages and distrusted the agent's own
continuation turns). The creator may do what the agent may, no more: no limit or file protection is lifted.
``exec``, ``write_file`` and ``send_message`` stay open to external turns (an agent must be able to work for and
answer others), within the command and path rules.
"""

from __future__ import annotations

import apsw

from automaton_min.agent.policy.types import (DB_UNAVAILABLE, PolicyEnv, PolicyRequest, Rule, Verdict, deny,
                                              every_tool, tools)

PRIORITY = 400
EXTERNAL_DANGEROUS_TOOL = "EXTERNAL_DANGEROUS_TOOL"
TRUSTED = frozenset({"creator", "agent"})

EXTERNAL_DENIED_TOOLS = frozenset({
    "transfer_credits", "x402_fetch", "topup_credits",  # money
    "create_sandbox",  # machines
    "update_genesis_prompt", "update_soul", "modify_heartbeat", "switch_model",  # who the agent is and what it runs
    "distress_signal",  # a stranger must not make the agent broadcast for help
    "spawn_child", "fund_child",  # children: a new agent, credits to it
    "message_child",  # a child takes its parent's signed word as its creator's: no stranger's words go through it
    "start_child",  # a stranger does not revive a dead child (a known payee again) nor run its sandbox
    "assign_task",  # a task given to a child is its creator's word too
    # memories that come back unlabelled, as the agent's own: a procedure, a goal note, a trust or a name given to
    # an agent (remember_fact stays open: its fact is stored as from outside and labelled so)
    "save_procedure", "set_goal", "note_about_agent",
    "forget", "complete_goal",  # nor do they erase what the agent remembers or the goal notes it keeps
})


def is_external(request: PolicyRequest) -> bool:
    """Anything but the creator and the agent itself is external (unknown values too: fail closed)."""
    return request.authority not in TRUSTED


def _restricted(request: PolicyRequest, env: PolicyEnv) -> bool:
    """What an external order may not reach: a tool of ``EXTERNAL_DENIED_TOOLS``, a dangerous one, a message to a
    child."""
    return (request.tool in EXTERNAL_DENIED_TOOLS or request.spec.risk in ("dangerous", "forbidden")
            or (request.tool == "send_message" and _to_a_child(request, env)))


def _external_tool_restriction(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    if not is_external(request) or not _restricted(request, env):
        return None
    if request.tool == "send_message":
        return deny(EXTERNAL_DANGEROUS_TOOL, "a message to one of your children carries your authority as its "
                    "creator, so it is not sent on behalf of an external message")
    return deny(EXTERNAL_DANGEROUS_TOOL, f"{request.tool} may not be used on behalf of an external message "
                "(only the agent's own turns or its creator)")


def _to_a_child(request: PolicyRequest, env: PolicyEnv) -> bool:
    from automaton_min.store.children import names_by_address

    to = request.arguments.get("to_address")
    return isinstance(to, str) and env.db is not None and to.lower() in names_by_address(env.db)


GOAL_FROM_OUTSIDE = "GOAL_FROM_OUTSIDE"
NOT_YOUR_GOAL = "NOT_YOUR_GOAL"
GOAL_CHANGES = ("complete_task", "cancel_goal")
OWN_SURVIVAL = frozenset({"distress_signal"})  # an outsider's goal never keeps the agent from asking for help


def _external_goal(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    """While a goal set on behalf of an external message is active, no turn but the creator's reaches what an
    external turn may not: the order stays outside, across turns."""
    if (request.authority == "creator" or env.db is None or request.tool in OWN_SURVIVAL
            or not _restricted(request, env)):
        return None
    from automaton_min.store.goals import active_goal_origin

    try:
        origin = active_goal_origin(env.db)
    except apsw.Error as exc:
        return deny(DB_UNAVAILABLE, f"the active goal could not be read ({type(exc).__name__}); refused")
    if origin is None or origin in TRUSTED:
        return None
    return deny(GOAL_FROM_OUTSIDE, f"the active goal was set on behalf of an external message, so {request.tool} "
                "waits for the creator (or cancel_goal it)")


def _outsider_changes_a_goal(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    """An external turn completes or cancels only what an external turn set."""
    if not is_external(request) or env.db is None:
        return None
    from automaton_min.store.goals import goal_origin_of

    try:
        origin = goal_origin_of(env.db, goal_id=request.arguments.get("goal_id"),
                                task_id=request.arguments.get("task_id"))
    except apsw.Error as exc:
        return deny(DB_UNAVAILABLE, f"the goal could not be read ({type(exc).__name__}); refused")
    if origin is None or origin not in TRUSTED:
        return None
    return deny(NOT_YOUR_GOAL, f"this goal was set by {'your creator' if origin == 'creator' else 'you'}, so "
                f"{request.tool} is not used on it on behalf of an external message")


def authority_rules() -> list[Rule]:
    return [
        Rule("authority.external_tool_restriction", PRIORITY, every_tool(), _external_tool_restriction,
             "external input never reaches dangerous tools"),
        Rule("authority.external_goal", PRIORITY, every_tool(), _external_goal,
             "a goal set for someone outside reaches nothing an outsider may not, without the creator"),
        Rule("authority.outsider_changes_a_goal", PRIORITY, tools(*GOAL_CHANGES), _outsider_changes_a_goal,
             "an outsider neither completes nor cancels the agent's or the creator's goal"),
    ]

"""Authority rule (priority 400): an external turn may not use a dangerous tool, nor one in ``EXTERNAL_DENIED_TOOLS``.

The reference had authority backwards (it trusted other agents' messages and distrusted the agent's own
continuation turns). The creator may do what the agent may, no more: no limit or file protection is lifted.
``exec``, ``write_file`` and ``send_message`` stay open to external turns (an agent must be able to work for and
answer others), within the command and path rules.
"""

from __future__ import annotations

from automaton_min.agent.policy.types import PolicyEnv, PolicyRequest, Rule, Verdict, deny, every_tool, tools

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
})


def is_external(request: PolicyRequest) -> bool:
    """Anything but the creator and the agent itself is external (unknown values too: fail closed)."""
    return request.authority not in TRUSTED


def _external_tool_restriction(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    if not is_external(request):
        return None
    if request.tool in EXTERNAL_DENIED_TOOLS or request.spec.risk in ("dangerous", "forbidden"):
        return deny(EXTERNAL_DANGEROUS_TOOL, f"{request.tool} may not be used on behalf of an external message "
                    "(only the agent's own turns or its creator)")
    if request.tool == "send_message" and _to_a_child(request, env):
        return deny(EXTERNAL_DANGEROUS_TOOL, "a message to one of your children carries your authority as its "
                    "creator, so it is not sent on behalf of an external message")
    return None


def _to_a_child(request: PolicyRequest, env: PolicyEnv) -> bool:
    from automaton_min.store.children import names_by_address

    to = request.arguments.get("to_address")
    return isinstance(to, str) and env.db is not None and to.lower() in names_by_address(env.db)


# What a goal set on an external turn may not lead to, in any later turn, without the creator.
SPENDING_TOOLS = frozenset({"transfer_credits", "fund_child", "x402_fetch", "topup_credits", "spawn_child"})
GOAL_FROM_OUTSIDE = "GOAL_FROM_OUTSIDE"


def _external_goal(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    if request.authority == "creator" or env.db is None:
        return None
    from automaton_min.store.goals import active_goal_origin

    origin = active_goal_origin(env.db)
    if origin is None or origin in TRUSTED:
        return None
    return deny(GOAL_FROM_OUTSIDE, f"the active goal was set on behalf of an external message, so {request.tool} "
                "waits for the creator (or cancel_goal it)")


def authority_rules() -> list[Rule]:
    return [
        Rule("authority.external_tool_restriction", PRIORITY, every_tool(), _external_tool_restriction,
             "external input never reaches dangerous tools"),
        Rule("authority.external_goal", PRIORITY, tools(*SPENDING_TOOLS), _external_goal,
             "a goal set for someone outside spends and spawns nothing without the creator"),
    ]

"""Authority rules (priority 400): who may ask for what.

Authority comes from where the turn's input came from (``tools.base.Authority``),
and this fixes the reference runtime, which had it backwards (it trusted messages
from any other agent and distrusted the agent's own continuation turns):

- ``creator``: a message signed by the creator's address. It may do what the
  agent may do - no more: the creator's wishes do not lift the money limits or
  the file protections.
- ``agent``: the agent's own turns (wake-up, continuation, its own notices). It
  may use every tool, within the other rules.
- ``external``: anything from other agents or the outside world, and any
  authority this engine does not know. Untrusted.

``authority.external_tool_restriction`` (``EXTERNAL_DANGEROUS_TOOL``): an external turn may not use a tool of
risk ``dangerous`` or ``forbidden``, nor any tool that moves money, creates machines or children, or changes who
the agent is (``EXTERNAL_DENIED_TOOLS``), whatever risk the tool declares. ``distress_signal`` is included: a
stranger must not be able to make the agent broadcast for help. ``exec``, ``write_file`` and ``send_message`` stay
usable (an agent must be able to work for and answer others), within the command and path rules; the agent's own
files are out of every tool's reach (``confine/protected.py``), whoever asks.
"""

from __future__ import annotations

from automaton_min.agent.policy.types import PolicyEnv, PolicyRequest, Rule, Verdict, deny, every_tool

PRIORITY = 400
EXTERNAL_DANGEROUS_TOOL = "EXTERNAL_DANGEROUS_TOOL"
TRUSTED = frozenset({"creator", "agent"})

EXTERNAL_DENIED_TOOLS = frozenset({
    "transfer_credits", "x402_fetch", "topup_credits",  # money
    "create_sandbox",  # machines
    "update_genesis_prompt", "update_soul", "modify_heartbeat", "switch_model",  # who the agent is and what it runs
    "distress_signal",  # calls for help
    "spawn_child", "fund_child",  # for the children issue, which adds these tools
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
    return None


def authority_rules() -> list[Rule]:
    return [
        Rule("authority.external_tool_restriction", PRIORITY, every_tool(), _external_tool_restriction,
             "external input never reaches dangerous tools"),
    ]

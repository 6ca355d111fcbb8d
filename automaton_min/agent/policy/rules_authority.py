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

Rules:

- ``authority.external_tool_restriction`` (``EXTERNAL_DANGEROUS_TOOL``): an
  external turn may not use a tool of risk ``dangerous`` or ``forbidden``, nor
  any tool that moves money, creates or deletes machines, replicates, or changes
  who the agent is: ``EXTERNAL_DENIED_TOOLS`` below, whatever risk the tool
  declares. ``distress_signal`` is included: a stranger must not be able to make
  the agent broadcast for help. ``exec``, ``write_file`` and ``send_message``
  stay usable (an agent must be able to work for and answer others), within
  the command and path rules and the self-modification rule below.
- ``authority.self_mod_from_external`` (``EXTERNAL_SELF_MOD``): an external turn
  may not write the agent's self files - ``SOUL.md``, ``constitution.md``,
  ``automaton.json``, the heartbeat configuration, the skills directory, the
  wallet, the API key file, the policy code - with a file tool or with ``exec``
  (the paths an ``exec`` command would write come from the command judge). Most
  of these are refused to everyone by the path and command rules; the skills
  directory, ``SOUL.md`` and the heartbeat file are the ones only this rule
  keeps from external turns.
"""

from __future__ import annotations

from automaton_min.agent.policy.commands import CommandJudge
from automaton_min.agent.policy.engine import PolicyEnv, PolicyRequest, Rule, Verdict, deny, every_tool, tools
from automaton_min.agent.policy.paths import CODE, SECRET, SELF, SKILLS, STATE, protection_for
from automaton_min.agent.policy.rules_paths import WRITE_TOOLS, path_arguments, path_tags

PRIORITY = 400
EXTERNAL_DANGEROUS_TOOL = "EXTERNAL_DANGEROUS_TOOL"
EXTERNAL_SELF_MOD = "EXTERNAL_SELF_MOD"
TRUSTED = frozenset({"creator", "agent"})

EXTERNAL_DENIED_TOOLS = frozenset({
    # money
    "transfer_credits", "x402_fetch", "topup_credits", "fund_child", "register_domain",
    # machines and replication
    "create_sandbox", "delete_sandbox", "spawn_child", "start_child",
    # who the agent is and what it runs
    "update_genesis_prompt", "update_soul", "modify_heartbeat", "edit_own_file", "switch_model",
    "install_npm_package", "install_mcp_server", "install_skill", "create_skill", "remove_skill",
    "pull_upstream", "reset_to_upstream", "revert_last_edit",
    # identity and reputation on chain, and calls for help
    "register_erc8004", "give_feedback", "distress_signal",
})
SELF_TAGS = frozenset({SELF, SKILLS, STATE, SECRET, CODE})


def is_external(request: PolicyRequest) -> bool:
    """Anything but the creator and the agent itself is external (unknown values too: fail closed)."""
    return request.authority not in TRUSTED


def _external_tool_restriction(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    if not is_external(request):
        return None
    if request.tool in EXTERNAL_DENIED_TOOLS or request.spec.risk in ("dangerous", "forbidden"):
        return deny(EXTERNAL_DANGEROUS_TOOL,
                    f"{request.tool} may not be used on behalf of an external message (only the agent's own turns or its creator)")
    return None


def _self_mod_from_external(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    if not is_external(request):
        return None
    protection = protection_for(env)
    if request.tool == "exec":
        command = request.arguments.get("command")
        if not isinstance(command, str):
            return None  # the command rule refuses it
        writes = CommandJudge(protection).analyze(command).writes
        hit = next((piece for piece, tags in writes if tags & SELF_TAGS), None)
    else:
        hit = next((raw for raw in path_arguments(request.arguments)
                    if isinstance(raw, str) and "\x00" not in raw and path_tags(protection, raw) & SELF_TAGS), None)
    if hit is not None:
        return deny(EXTERNAL_SELF_MOD, f"an external message may not change the agent's own files ({hit})")
    return None


def authority_rules() -> list[Rule]:
    return [
        Rule("authority.external_tool_restriction", PRIORITY, every_tool(), _external_tool_restriction,
             "external input never reaches dangerous tools"),
        Rule("authority.self_mod_from_external", PRIORITY, tools(*WRITE_TOOLS, "exec"), _self_mod_from_external,
             "external input never rewrites the agent's self files"),
    ]

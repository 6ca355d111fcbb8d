"""Command safety rules (priority 300): what ``exec`` may run, and shell syntax where none belongs.

``command.forbidden_patterns`` hands the command to ``CommandJudge`` (see
``commands.py`` for exactly what is denied and what is allowed, and why):
``FORBIDDEN_COMMAND`` for what would harm the agent, ``OBFUSCATED_COMMAND`` for
decoded data that is run. ``command.shell_injection`` refuses shell
metacharacters in arguments that tools paste into commands
(``SHELL_INJECTION_DETECTED``).
"""

from __future__ import annotations

import re

from automaton_min.agent.policy.commands import CommandJudge
from automaton_min.agent.policy.engine import PolicyEnv, PolicyRequest, Rule, Verdict, deny, tools
from automaton_min.agent.policy.paths import protection_for

PRIORITY = 300
SHELL_INJECTION_DETECTED = "SHELL_INJECTION_DETECTED"
EXEC_TOOLS = ("exec",)

# Arguments some tools place inside a shell command (as in the reference).
INJECTION_FIELDS: dict[str, tuple[str, ...]] = {
    "pull_upstream": ("commit",),
    "install_npm_package": ("package",),
    "install_mcp_server": ("package", "name"),
    "install_skill": ("name", "url"),
    "create_skill": ("name",),
    "remove_skill": ("name",),
}
SHELL_METACHARACTERS = re.compile(r"[;&|`$(){}<>\n\r]")


def _forbidden_patterns(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    command = request.arguments.get("command")
    if not isinstance(command, str):
        return deny("VALIDATION_FAILED", "command must be text")
    finding = CommandJudge(protection_for(env)).analyze(command).finding
    return deny(finding.code, f"Blocked: {finding.message}") if finding else None


def _shell_injection(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    for name in INJECTION_FIELDS.get(request.tool, ()):
        value = request.arguments.get(name)
        if isinstance(value, str) and SHELL_METACHARACTERS.search(value):
            return deny(SHELL_INJECTION_DETECTED, f"{name} contains shell syntax")
    return None


def command_rules() -> list[Rule]:
    return [
        Rule("command.forbidden_patterns", PRIORITY, tools(*EXEC_TOOLS), _forbidden_patterns,
             "exec may not harm the agent, read its secrets or run decoded data"),
        Rule("command.shell_injection", PRIORITY, tools(*INJECTION_FIELDS), _shell_injection,
             "no shell syntax in arguments that end up in a command"),
    ]

"""Command rules (priority 300), where the kernel does not confine ``exec``: no command for an external turn, and
a short list of commands refused to the others.

README (Security, Where the kernel does not confine) says where that is; elsewhere these rules refuse nothing. The list
is a speed bump on the command's text: a program the agent writes and then runs can still do anything its user may.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Any

from automaton_min.agent.policy.rules_authority import is_external
from automaton_min.agent.policy.types import VALIDATION_FAILED, PolicyEnv, PolicyRequest, Rule, Verdict, deny, tools

PRIORITY = 300
FORBIDDEN_COMMAND = "FORBIDDEN_COMMAND"
EXTERNAL_UNCONFINED_EXEC = "EXTERNAL_UNCONFINED_EXEC"

# Parts of one simple command: no separator between the verb and what it names.
_ARGS = r"[^;&|\n]*"
_TABLES = r"(?:turns|tool_calls|kv|identity|policy_decisions|spend_tracking|payment_intents|transactions|" \
          r"inbox_messages|schema_version|soul_history)"
_SELF = r"(?<![./])automaton"  # the program or its service, not a path through the home
# (pattern, why); ``{H}`` is the agent's home as a command may name it (see ``_home_names``).
FORBIDDEN = (
    (r"\brm\s+(?:-\S+\s+)*(?:--no-preserve-root\s+)?/\*?(?:\s|$)", "deletes the whole filesystem"),
    (rf"\b(?:rm|rmdir|unlink|shred|truncate|mv|chmod|chown|chattr)\b{_ARGS}{{H}}",
     "deletes or changes the agent's home"),
    (rf"(?:>|\btee\b{_ARGS}|\bsed\s+-i{_ARGS}|\bdd\b{_ARGS}\bof=)\s*{{H}}", "writes into the agent's home"),
    (rf"\b(?:cp|ln|install|rsync)\b{_ARGS}\s{{H}}\S*\s*(?:$|[;&|\n])", "writes into the agent's home"),
    (rf"\b(?:tar|zip|7z|grep|egrep|rg|ag|scp|rsync|curl|wget)\b{_ARGS}{{H}}/?(?:\s|$)",
     "archives, searches or sends the agent's home as a whole"),
    (r"wallet\.json", "names the wallet (wallet.json)"),
    (r"automaton\.json", "names the configuration, which may hold API keys (automaton.json)"),
    (r"{H}/config\.json", "names the provisioned API key (config.json in the home)"),
    (r"(?:^|[\s/<>=@:])\.env(?:\.(?!example\b|sample\b|template\b|dist\b)[\w.-]+)?(?=$|[\s;&|)<>])",
     "names a .env file"),
    (r"(?:^|[\s/='])\.(?:ssh|gnupg|aws|kube)/|/etc/g?shadow\b",
     "reads credentials (.ssh, .gnupg, .aws, .kube, shadow)"),
    (r"/proc/[^/\s]+/(?:environ|mem)\b", "reads a process's environment or memory"),
    (r"(?i)\b(?:drop|truncate)\s+table\b", "destroys a database table"),
    (rf"(?i)\b(?:delete\s+from|update|insert\s+(?:or\s+\w+\s+)?into)\s+(?:main\.)?\W?{_TABLES}\b",
     "rewrites the agent's own records"),
    (rf"\b(?:pkill|killall)\b{_ARGS}(?:{_SELF}|python)", "stops the agent"),
    (rf"\bkill\b{_ARGS}(?:\$\{{?PPID\b|\s-1(?:\s|$)|{_SELF})", "stops the agent (its parent, or every process)"),
    (rf"\b(?:systemctl|service)\b(?={_ARGS}{_SELF}){_ARGS}\b(?:stop|disable|kill|mask|restart|edit|revert)\b",
     "stops or changes the agent's service"),
    (r"systemd/[^\s;&|]*automaton", "changes the agent's service unit"),
    (r"(?:^|[;&|(\n]\s*|\bsudo\s+)(?:shutdown|poweroff|halt|reboot)\b", "shuts the machine down"),
    (r"(\w+|:)\s*\(\)\s*\{[^}]*\1\s*\|\s*\1\s*&", "is a fork bomb"),
    (r"\bmkfs(?:\.\w+)?\b|\bdd\b[^;&|\n]*\bof=/dev/(?:sd|hd|vd|xvd|nvme|mmcblk)", "overwrites a disk"),
    (r"(?:base64\s+(?:-d|--decode)|xxd\s+-r|openssl\s+\S+\s+-d)[^\n]*\|\s*(?:sudo\s+)?\w*sh\b",
     "runs decoded data as a script"),
)


def _home_names(home: str, workspace: str) -> str:
    """How a command may name the home (any ``.automaton`` directory, its real path, its path from the workspace),
    and not the workspace when it lies inside the home."""
    names = {re.escape(home)} | ({re.escape(os.path.relpath(home, workspace))} if home != workspace else set())
    alternatives = "|".join(sorted(names, key=len, reverse=True))
    inside = os.path.relpath(workspace, home)
    spare = "" if inside.startswith("..") else rf"(?!/{re.escape(inside)}(?:/|\s|$))"
    return rf"(?:[^\s;&|<>]*\.automaton\b|{alternatives})(?![\w.-]){spare}"


@lru_cache(maxsize=8)
def _compiled(home: str, workspace: str) -> tuple[tuple[re.Pattern[str], str], ...]:
    """The list for one home and workspace, compiled on first use (never at import)."""
    names = _home_names(home, workspace)
    return tuple((re.compile(pattern.replace("{H}", names)), why) for pattern, why in FORBIDDEN)


def _plain(command: str) -> str:
    """The command with quotes and backslashes taken out and ``${HOME}``/``${IFS}`` spelled plainly."""
    text = re.sub(r"[\"'\\]", "", command)
    return re.sub(r"\$\{?IFS\}?", " ", text.replace("${HOME}", "$HOME"))


def forbidden(command: str, home: str, workspace: str) -> str | None:
    """Why ``command`` is refused where it would run unconfined, or ``None``."""
    text = _plain(command)
    for pattern, why in _compiled(os.path.realpath(home), os.path.realpath(workspace)):
        if pattern.search(text):
            return why
    return None


def kernel_confines(sandbox: Any, own_sandbox_id: str = "") -> bool:
    """Whether the kernel keeps ``sandbox``'s commands from the agent's home: confined locally, or run in a Conway
    sandbox that is not the machine the daemon runs on (``own_sandbox_id``)."""
    if getattr(sandbox, "confined", False):
        return True
    if getattr(sandbox, "is_local", True):
        return False  # unconfinedExec, or no confinement at all
    return not own_sandbox_id or getattr(sandbox, "sandbox_id", None) != own_sandbox_id


def _forbidden_patterns(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    command = request.arguments.get("command")
    if not isinstance(command, str):
        return deny(VALIDATION_FAILED, "command must be text")
    if env.commands_confined:
        return None
    why = forbidden(command, str(env.home), str(env.workspace))
    return deny(FORBIDDEN_COMMAND, f"Blocked: the command {why}; commands here run unconfined") if why else None


def _external_unconfined(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    if env.commands_confined or not is_external(request):
        return None
    return deny(EXTERNAL_UNCONFINED_EXEC, "exec may not be used on behalf of an external message here: commands run "
                "unconfined, with the agent's own rights")


def command_rules() -> list[Rule]:
    return [
        Rule("command.forbidden_patterns", PRIORITY, tools("exec"), _forbidden_patterns,
             "where the kernel does not confine exec, it may not harm the agent or read its keys"),
        Rule("command.external_unconfined", PRIORITY, tools("exec"), _external_unconfined,
             "where the kernel does not confine exec, external input runs no command"),
    ]

"""Path rules (priority 200): ``write_file`` never writes a protected path, ``read_file`` never reads a secret.

A path is checked in every reading (as given, ``$HOME``-expanded, URL-decoded) and every canonical meaning
(``paths.Protection``).
"""

from __future__ import annotations

from automaton_min.agent.policy.paths import BLOCKED, BLOCKED_READ, CODE, KEY, SECRET, STATE, protection_for
from automaton_min.agent.policy.types import VALIDATION_FAILED, PolicyEnv, PolicyRequest, Rule, Verdict, deny, tools

PRIORITY = 200
PROTECTED_FILE = "PROTECTED_FILE"
SENSITIVE_FILE_READ = "SENSITIVE_FILE_READ"


def _check_path(request: PolicyRequest, env: PolicyEnv, forbidden: set[str], code: str, what: str) -> Verdict | None:
    raw = request.arguments.get("path")
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw or "\x00" in raw:
        return deny(VALIDATION_FAILED, "path must be non-empty text without NUL bytes")
    protection = protection_for(env)
    for variant in protection.variants(raw):
        for canon in protection.canonical(variant):
            if protection.tags(canon) & forbidden:
                return deny(code, f"{raw} {what}")
    return None


def _protected_files(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    return _check_path(request, env, {STATE, SECRET, CODE, BLOCKED}, PROTECTED_FILE,
                       "is a protected file (the runtime's wallet, configuration, API key, database, constitution, "
                       "soul, heartbeat or skills, a key, the policy's code, or a credential or system directory); "
                       "it is never written")


def _read_sensitive(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    return _check_path(request, env, {SECRET, KEY, BLOCKED_READ}, SENSITIVE_FILE_READ,
                       "holds a key or credential (wallet, API key, .env, private key); it is never read")


def path_rules() -> list[Rule]:
    return [
        Rule("path.protected_files", PRIORITY, tools("write_file"), _protected_files,
             "file tools never write the runtime's own files, keys or system directories"),
        Rule("path.read_sensitive", PRIORITY, tools("read_file"), _read_sensitive,
             "file tools never read keys or credentials"),
    ]

"""Path protection rules (priority 200): the file tools never touch the runtime's files or anyone's keys.

Paths are judged canonically (``paths.Protection``), in every reading: as given, ``$HOME``-expanded and
URL-decoded.

- ``path.protected_files`` (``write_file``): no writing the home's protected entries (``confine/protected.py``:
  wallet, configuration, API key, database, constitution, ``SOUL.md``, heartbeat, skills; ``update_soul`` and
  ``modify_heartbeat`` change the two that change), the configured database, heartbeat and skills paths, a file
  holding a key, the policy's code, or credential and system directories (``PROTECTED_FILE``).
- ``path.read_sensitive`` (``read_file``): no reading a file that holds a key, a private key or certificate, a
  credential directory, ``/etc/shadow`` or a process's environment (``SENSITIVE_FILE_READ``).
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

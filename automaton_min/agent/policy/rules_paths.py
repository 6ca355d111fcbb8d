"""Path protection rules (priority 200): file tools may not touch the runtime's files or anyone's keys.

Paths are judged canonically (``paths.Protection``): ``~`` expanded, relative to
the workspace, ``..`` collapsed, symlinks followed even when the file does not
exist yet, hard links recognised, and the ``$HOME``-expanded and URL-decoded
readings checked too.

- ``path.protected_files`` (write tools): no writing the wallet, ``automaton.json``,
  the API-key file ``config.json``, ``state.db`` and its WAL/SHM, ``constitution.md``,
  the policy engine's code, or anything in ``.ssh``, ``.gnupg``, ``.aws``, ``.kube``,
  ... ``/etc/systemd``, ``/etc/passwd``, ``/etc/shadow``, ``/proc``, ``/sys``
  (``PROTECTED_FILE``). ``SOUL.md`` and the heartbeat file are left to the
  authority rules: the agent may write them, others may not.
- ``path.read_sensitive`` (read tools): no reading the wallet, ``automaton.json``,
  the API-key file, ``.env`` files, private keys and certificates (``*.pem``,
  ``*.key``, ``id_rsa`` ...), credential directories, ``/etc/shadow`` or a
  process's environment (``SENSITIVE_FILE_READ``).
"""

from __future__ import annotations

from typing import Any

from automaton_min.agent.policy.engine import PolicyEnv, PolicyRequest, Rule, Verdict, deny, tools
from automaton_min.agent.policy.paths import BLOCKED, BLOCKED_READ, CODE, KEY, SECRET, STATE, Protection, protection_for

PRIORITY = 200
PROTECTED_FILE = "PROTECTED_FILE"
SENSITIVE_FILE_READ = "SENSITIVE_FILE_READ"

WRITE_TOOLS = ("write_file", "edit_file", "edit_own_file", "append_file")
READ_TOOLS = ("read_file",)
PATH_FIELDS = ("path", "file_path", "filename")


def path_arguments(arguments: Any) -> list[Any]:
    return [arguments[name] for name in PATH_FIELDS if name in arguments]


def path_tags(protection: Protection, raw: str) -> frozenset[str]:
    """Tags of every canonical reading of ``raw``."""
    found: set[str] = set()
    for variant in protection.variants(raw):
        for canon in protection.canonical(variant):
            found |= protection.tags(canon)
    return frozenset(found)


def _check_paths(request: PolicyRequest, env: PolicyEnv, forbidden: set[str], code: str, what: str) -> Verdict | None:
    paths = path_arguments(request.arguments)
    if not paths:
        return None
    protection = protection_for(env)
    for raw in paths:
        if not isinstance(raw, str) or not raw or "\x00" in raw:
            return deny("VALIDATION_FAILED", "path must be non-empty text without NUL bytes")
        hit = path_tags(protection, raw) & forbidden
        if hit:
            return deny(code, f"{raw} {what}")
    return None


def _protected_files(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    return _check_paths(request, env, {STATE, SECRET, CODE, BLOCKED}, PROTECTED_FILE,
                        "is a protected file (the runtime's wallet, configuration, API key, database, constitution, "
                        "policy code, or a credential or system directory); it is never written")


def _read_sensitive(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    return _check_paths(request, env, {SECRET, KEY, BLOCKED_READ}, SENSITIVE_FILE_READ,
                        "holds a key or credential (wallet, API key, .env, private key); it is never read")


def path_rules() -> list[Rule]:
    return [
        Rule("path.protected_files", PRIORITY, tools(*WRITE_TOOLS), _protected_files,
             "file tools never write the runtime's own files, keys or system directories"),
        Rule("path.read_sensitive", PRIORITY, tools(*READ_TOOLS), _read_sensitive,
             "file tools never read keys or credentials"),
    ]
